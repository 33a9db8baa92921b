//! Spinners on stderr for the commands that may take more than a couple of seconds (waits,
//! benches, first-use set-ups). Hidden when stderr is not a terminal (pipes, CI logs) or when
//! the output is JSON, so scripts read only the answer.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;

/// A ticking spinner saying `message`, or a hidden one when `show` is false or stderr is not a
/// terminal. End it with `finish_and_clear`.
pub fn spinner(show: bool, message: &str) -> ProgressBar {
    if !show || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
        bar.set_style(style);
    }
    bar.set_message(message.to_owned());
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// A bar counting `len` steps of `message` (turns, streams), or a hidden one when stderr is
/// not a terminal. Advance it with `inc`, end it with `finish_and_clear`.
pub fn bar(len: u64, message: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) =
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({elapsed}, {per_sec})")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(message.to_owned());
    bar
}
