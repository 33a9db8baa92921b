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
