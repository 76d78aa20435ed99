//! HTTP/2 stream output both sides share: the client streams (h2conn.rs) and
//! the streams to servers (upstream/h2.rs) send DATA as the peer's window allows.

use crate::observe::termination::Termination;
use bytes::Bytes;
use h2::SendStream;
use std::time::Duration;

/// Sends `data` as the peer's window grants capacity, with END_STREAM on
/// the last frame when `end`; fails when the window stays shut for `idle` or
/// the stream is gone.
pub(crate) async fn send_all(
    send: &mut SendStream<Bytes>,
    mut data: Bytes,
    end: bool,
    idle: Duration,
) -> Result<(), Termination> {
    if data.is_empty() && end {
        return send.send_data(data, true).map_err(|_| Termination::ClientAborted);
    }
    while !data.is_empty() {
        send.reserve_capacity(data.len());
        let granted = match tokio::time::timeout(idle, std::future::poll_fn(|cx| send.poll_capacity(cx))).await {
            Err(_) => return Err(Termination::ClientTimeout),
            Ok(None | Some(Err(_))) => return Err(Termination::ClientAborted),
            Ok(Some(Ok(n))) => n,
        };
        if granted == 0 {
            continue;
        }
        let chunk = data.split_to(granted.min(data.len()));
        send.send_data(chunk, end && data.is_empty()).map_err(|_| Termination::ClientAborted)?;
    }
    Ok(())
}
