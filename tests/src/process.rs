//! Child processes of a test: output goes to files (a chatty child can never block on a full
//! pipe, and the files survive for diagnostics), and readiness is the URL a child prints.

use crate::error::{HarnessError, HarnessResult};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where one child's stdout and stderr go.
#[derive(Debug, Clone)]
pub(crate) struct LogFiles {
    pub stdout: PathBuf,
    pub stderr: PathBuf,
}

impl LogFiles {
    /// `<dir>/<stem>.stdout` and `<dir>/<stem>.stderr`.
    pub(crate) fn in_dir(dir: &Path, stem: &str) -> Self {
        LogFiles {
            stdout: dir.join(format!("{stem}.stdout")),
            stderr: dir.join(format!("{stem}.stderr")),
        }
    }

    /// The last `max` bytes of stderr, for a failure message.
    pub(crate) fn stderr_tail(&self, max: usize) -> String {
        tail(&self.stderr, max)
    }

    /// The last `max` bytes of stdout, for a failure message.
    pub(crate) fn stdout_tail(&self, max: usize) -> String {
        tail(&self.stdout, max)
    }
}

/// Spawns `command` with stdin closed and stdout/stderr into `logs`.
pub(crate) fn spawn_logged(
    command: &mut Command,
    logs: &LogFiles,
    what: &str,
) -> HarnessResult<Child> {
    let stdout = File::create(&logs.stdout)
        .map_err(|e| HarnessError::io(format!("create {}", logs.stdout.display()), e))?;
    let stderr = File::create(&logs.stderr)
        .map_err(|e| HarnessError::io(format!("create {}", logs.stderr.display()), e))?;
    command
        .stdin(Stdio::null())
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::from(stderr))
        .spawn()
        .map_err(|source| HarnessError::Spawn {
            what: what.to_owned(),
            source,
        })
}

/// Waits until the child's stdout has a line containing `marker` followed by a URL, and returns
/// that URL (`http://127.0.0.1:PORT`). Fails early when the child exits.
pub(crate) fn wait_for_url(
    child: &mut Child,
    logs: &LogFiles,
    marker: &str,
    timeout: Duration,
    what: &str,
) -> HarnessResult<String> {
    let deadline = Instant::now() + timeout;
    loop {
        let out = std::fs::read_to_string(&logs.stdout).unwrap_or_default();
        if let Some(url) = find_url_after(&out, marker) {
            return Ok(url);
        }
        let not_ready = |reason: String| HarnessError::NotReady {
            what: what.to_owned(),
            reason,
            stderr: logs.stderr_tail(6000),
            stdout: logs.stdout_tail(2000),
        };
        match child.try_wait() {
            Ok(Some(status)) => return Err(not_ready(format!("it exited with {status}"))),
            Ok(None) => {}
            Err(e) => return Err(not_ready(format!("cannot poll it: {e}"))),
        }
        if Instant::now() >= deadline {
            return Err(not_ready(format!(
                "no line containing {marker:?} within {} s",
                timeout.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// The URL following `marker` on a complete line of `output`.
fn find_url_after(output: &str, marker: &str) -> Option<String> {
    // Only complete lines: the child may be mid-write.
    let complete = &output[..output.rfind('\n')? + 1];
    complete.lines().find_map(|line| {
        let rest = &line[line.find(marker)? + marker.len()..];
        let url = rest.split_whitespace().next()?;
        url.starts_with("http://").then(|| url.to_owned())
    })
}

/// Kills (SIGKILL) and reaps a child; a child that already exited is just reaped.
pub(crate) fn kill_and_reap(child: &mut Child) {
    // An error here means it already exited; `wait` reaps it either way.
    let _ = child.kill();
    let _ = child.wait();
}

/// The last `max` bytes of a file (lossy UTF-8), or a note that it cannot be read.
pub(crate) fn tail(path: &Path, max: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let start = bytes.len().saturating_sub(max);
            String::from_utf8_lossy(&bytes[start..]).into_owned()
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::find_url_after;

    #[test]
    fn finds_the_url_on_a_complete_line_only() {
        let marker = "agentlane listening on ";
        assert_eq!(
            find_url_after(
                "log\nagentlane listening on http://127.0.0.1:4321\n",
                marker
            ),
            Some("http://127.0.0.1:4321".to_owned())
        );
        assert_eq!(
            find_url_after("agentlane listening on http://127.0.0.1:43", marker),
            None
        );
        assert_eq!(
            find_url_after(
                "[aimock] aimock server listening on http://127.0.0.1:9 \n",
                "aimock server listening on "
            ),
            Some("http://127.0.0.1:9".to_owned())
        );
        assert_eq!(find_url_after("nothing here\n", marker), None);
    }
}
