//! A minimal blocking HTTP/1.0 client for aimock's control API on loopback. Blocking and
//! runtime-free on purpose: it also works inside `Drop`, where the end-of-test checks run.

use crate::error::{HarnessError, HarnessResult, truncate};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

const IO_TIMEOUT: Duration = Duration::from_secs(20);

/// Sends one request and returns `(status, body)`. HTTP/1.0 makes the server close the
/// connection after the body, with no chunked encoding to undo.
pub(crate) fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> HarnessResult<(u16, String)> {
    let what = format!("{method} {path}");
    let io = |e| HarnessError::io(format!("aimock {what}"), e);
    let mut stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT).map_err(io)?;
    stream.set_read_timeout(Some(IO_TIMEOUT)).map_err(io)?;
    stream.set_write_timeout(Some(IO_TIMEOUT)).map_err(io)?;
    let body = body.unwrap_or("");
    let head = format!(
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).map_err(io)?;
    stream.write_all(body.as_bytes()).map_err(io)?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).map_err(io)?;
    let text = String::from_utf8_lossy(&raw);
    let control = |message: String| HarnessError::Control {
        request: what.clone(),
        message,
    };
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| control(format!("no header end in {}", truncate(&text, 300))))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| control(format!("no status in {}", truncate(head, 300))))?;
    Ok((status, body.to_owned()))
}
