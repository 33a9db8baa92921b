//! What a benchmarked server's resident memory is made of, read from `/proc` (Linux only; `None`
//! elsewhere): the anonymous memory it allocated, and its file pages split into the binary's own
//! code and data, the mapped database file (SQLite's `mmap_size`) and the rest (shared
//! libraries), with its peak and its CPU time. File pages are the page cache seen through a mapping: the kernel drops them under
//! pressure, and the binary's count for every process running it.

/// A process's resident memory, in KiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resident {
    /// Anonymous memory (heap, stacks): what the process itself holds.
    pub anonymous: u64,
    /// File pages of the process's own executable.
    pub binary: u64,
    /// File pages of mappings of a file under the data directory (the database).
    pub database: u64,
    /// Every other resident page (shared libraries, other files, special mappings).
    pub other: u64,
}

impl Resident {
    /// The whole resident set.
    pub fn total(&self) -> u64 {
        self.anonymous + self.binary + self.database + self.other
    }
}

/// A `kB` field of `/proc/<pid>/status` (e.g. `"VmHWM:"`, the peak resident set), in KiB.
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|line| kib(line, field))
}

/// The peak resident set (`VmHWM`) of a process, in KiB.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmHWM:")
}

/// CPU seconds (user + system) a process used so far, from `/proc/<pid>/stat`.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the `(comm)`: state is field 3; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // USER_HZ is 100 on every Linux this runs on.
    Some((utime + stime) / 100.0)
}

/// Reads `/proc/<pid>/smaps` of a process whose binary is `exe` and whose database lives
/// under `data_dir`.
pub fn resident_of(pid: u32, exe: &str, data_dir: &str) -> Option<Resident> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).ok()?;
    Some(split_smaps(&smaps, exe, data_dir))
}

/// Sums the `Rss` lines of an `smaps` text by the mapping they belong to; a file mapping's
/// `Anonymous` pages (private copies, e.g. the binary's relocated data) are the process's own.
pub fn split_smaps(smaps: &str, exe: &str, data_dir: &str) -> Resident {
    let mut resident = Resident::default();
    let mut path = "";
    for line in smaps.lines() {
        if let Some(header) = mapping_header(line) {
            path = header;
        } else if let Some(rss) = kib(line, "Rss:") {
            *bucket(&mut resident, path, exe, data_dir) += rss;
        } else if let Some(anon) = kib(line, "Anonymous:")
            && !is_anonymous(path)
        {
            let file = bucket(&mut resident, path, exe, data_dir);
            *file = file.saturating_sub(anon);
            resident.anonymous += anon;
        }
    }
    resident
}

/// A mapping of no file (`""`) or a special one (`[heap]`, `[stack]`, ...).
fn is_anonymous(path: &str) -> bool {
    path.is_empty() || path.starts_with('[')
}

/// Which count a mapping of `path` adds to.
fn bucket<'a>(resident: &'a mut Resident, path: &str, exe: &str, data_dir: &str) -> &'a mut u64 {
    if is_anonymous(path) {
        &mut resident.anonymous
    } else if path == exe {
        &mut resident.binary
    } else if path.starts_with(data_dir) {
        &mut resident.database
    } else {
        &mut resident.other
    }
}

/// The path of a mapping's header line (`addr perms offset dev inode [path]`), `""` for an
/// anonymous mapping; `None` for a field line.
fn mapping_header(line: &str) -> Option<&str> {
    let mut fields = line.split_whitespace();
    let range = fields.next()?;
    let (start, end) = range.split_once('-')?;
    if !start.chars().all(|c| c.is_ascii_hexdigit()) || !end.chars().all(|c| c.is_ascii_hexdigit())
    {
        return None;
    }
    let _perms = fields.next()?;
    let _offset = fields.next()?;
    let _dev = fields.next()?;
    let _inode = fields.next()?;
    Some(fields.next().unwrap_or(""))
}

/// The value of a `Field:   123 kB` line.
fn kib(line: &str, field: &str) -> Option<u64> {
    line.strip_prefix(field)?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXE: &str = "/opt/agentlane";
    const DATA: &str = "/data/dir";

    /// Mappings as (path, `Rss`, `Anonymous`).
    type Mappings = &'static [(&'static str, u64, u64)];

    fn mapping(path: &str, rss: u64, anon: u64) -> String {
        format!(
            "55d0c0000000-55d0c0100000 r-xp 00000000 fd:01 1234 {path}\n\
             Size:               1024 kB\n\
             Rss:              {rss} kB\n\
             Pss:              {rss} kB\n\
             Anonymous:        {anon} kB\n\
             VmFlags: rd ex mr mw me\n"
        )
    }

    #[test]
    fn each_mapping_lands_in_its_bucket() {
        // (mappings as (path, Rss, Anonymous), expected split)
        let table: &[(Mappings, Resident)] = &[
            (&[], Resident::default()),
            (
                &[(EXE, 900, 0), ("/data/dir/agentlane.sqlite3", 300, 0)],
                Resident {
                    binary: 900,
                    database: 300,
                    ..Resident::default()
                },
            ),
            (
                &[("", 500, 500), ("[heap]", 200, 200), ("[stack]", 8, 8)],
                Resident {
                    anonymous: 708,
                    ..Resident::default()
                },
            ),
            (
                // the binary's relocated data: private dirty pages are the process's own memory
                &[(EXE, 100, 40), ("/usr/lib/libc.so.6", 1400, 12)],
                Resident {
                    anonymous: 52,
                    binary: 60,
                    other: 1388,
                    ..Resident::default()
                },
            ),
            (
                // a path that only starts like the data directory's sibling is not the database
                &[
                    ("/data/dir2/x", 10, 0),
                    ("/data/dir/agentlane.sqlite3-shm", 32, 0),
                ],
                Resident {
                    database: 32,
                    other: 10,
                    ..Resident::default()
                },
            ),
        ];
        for (mappings, want) in table {
            let smaps: String = mappings
                .iter()
                .map(|(path, rss, anon)| mapping(path, *rss, *anon))
                .collect();
            let data_dir = format!("{DATA}/");
            assert_eq!(split_smaps(&smaps, EXE, &data_dir), *want, "{mappings:?}");
        }
    }

    #[test]
    fn this_process_has_a_peak_and_cpu_time() {
        let pid = std::process::id();
        if std::fs::metadata("/proc/self/status").is_err() {
            return; // not Linux
        }
        assert!(peak_rss_kib(pid).is_some_and(|kib| kib > 0));
        assert!(status_kib(pid, "VmRSS:").is_some_and(|kib| kib > 0));
        assert!(cpu_seconds(pid).is_some_and(|s| s >= 0.0));
    }

    #[test]
    fn the_total_is_the_sum_of_the_buckets() {
        let r = Resident {
            anonymous: 1,
            binary: 2,
            database: 3,
            other: 4,
        };
        assert_eq!(r.total(), 10);
    }

    #[test]
    fn this_process_reads_as_some_binary_and_some_anonymous_memory() {
        let exe = std::env::current_exe().expect("exe");
        let exe = exe.display().to_string();
        let Some(r) = resident_of(std::process::id(), &exe, "/nonexistent/") else {
            return; // not Linux
        };
        assert!(r.binary > 0, "{r:?}");
        assert!(r.anonymous > 0, "{r:?}");
        assert_eq!(r.database, 0, "{r:?}");
    }
}
