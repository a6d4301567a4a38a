//! The write gate: a request body that will not be written past an instant.
//!
//! The check before each hop ([`super::Request::write_by`]) runs in the attempt's task; the
//! bytes are written later by the connection's own task, after a connection was taken from the
//! pool or dialed. A host paused in between (SIGSTOP, a frozen VM) would, when it wakes, have
//! its connection task write the request before the attempt's timer could fire — after another
//! host took the claim back. So the body itself looks at the clock when the connection asks for
//! it, right before the head and the body are flushed together: past the instant it yields an
//! error instead, and hyper drops the connection with the head still unflushed in its buffer.
//!
//! An empty body is never asked for (hyper writes the head alone), so requests without a body
//! have only the check before the hop.
//!
//! The window left is between that look at the clock and the write: a host stopped there
//! writes when it wakes. It is microseconds wide, but it cannot be closed from this side of
//! the connection, so each body let through is logged at `trace` level with the wall-clock
//! time of its look ([`RELEASED`]): a request that reached its target late can then be told
//! apart, a stop inside the window (looked before the stop) from a gate that failed (looked
//! after the wake). The shared-database SIGSTOP test reads these lines.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use http::HeaderValue;
use http_body::{Frame, SizeHint};

/// The message of the `trace` event logged for each body let through, with the fields
/// `delivery_id` (the request's `X-Spoold-Delivery-ID`, if any) and `looked_at_us` (when the
/// clock was read, microseconds since the Unix epoch).
pub const RELEASED: &str = "request body released to its connection";

/// The gate was closed when the connection asked for the body: nothing was written.
#[derive(Debug, thiserror::Error)]
#[error("not written: the connection was ready only after the claim allowed it")]
pub(super) struct Closed;

/// A body of known length, yielded in one frame if asked for by `write_by`.
struct Gated {
    body: Option<Bytes>,
    len: u64,
    write_by: Instant,
    /// The request's delivery id, for the `trace` event.
    delivery_id: Option<HeaderValue>,
}

impl http_body::Body for Gated {
    type Data = Bytes;
    type Error = Closed;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Closed>>> {
        let Some(body) = self.body.take() else {
            return Poll::Ready(None);
        };
        // Read before the check: a stop between the check and the write comes after this time.
        let looked_at = SystemTime::now();
        if Instant::now() > self.write_by {
            return Poll::Ready(Some(Err(Closed)));
        }
        tracing::trace!(
            delivery_id = self.delivery_id.as_ref().and_then(|v| v.to_str().ok()),
            looked_at_us = looked_at
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as u64),
            "{RELEASED}"
        );
        Poll::Ready(Some(Ok(Frame::data(body))))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        // Exact, so hyper sends `Content-Length` (never chunked) as for a plain body.
        SizeHint::with_exact(if self.body.is_some() { self.len } else { 0 })
    }
}

/// `bytes` as a request body that is not written past `write_by` (empty bodies as they are);
/// `delivery_id` names it in the `trace` event.
pub(super) fn body(
    bytes: Bytes,
    write_by: Instant,
    delivery_id: Option<&HeaderValue>,
) -> reqwest::Body {
    if bytes.is_empty() {
        return reqwest::Body::from(bytes);
    }
    reqwest::Body::wrap(Gated {
        len: bytes.len() as u64,
        body: Some(bytes),
        write_by,
        delivery_id: delivery_id.cloned(),
    })
}

/// Whether `err` is the gate refusing the body.
pub(super) fn closed(err: &reqwest::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if e.is::<Closed>() {
            return true;
        }
        source = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::AsyncReadExt;
    use tokio::net::{TcpSocket, TcpStream};

    use super::super::{AddressPolicy, Outbound, OutboundConfig, Request, SendErrorCode};

    /// A connection that becomes ready only after the request's instant: its head and body are
    /// never written. The listener's accept queue is full when the request dials, so the kernel
    /// drops its SYN and the client sends it again a second later; meanwhile the queue is
    /// drained, so the connection is made then — 700 ms past `write_by`, well within the
    /// request's timeout (a paused host's timer fires late in just this way).
    #[tokio::test]
    async fn a_connection_ready_only_after_the_instant_writes_nothing() {
        let socket = TcpSocket::new_v4().expect("socket");
        socket
            .bind("127.0.0.1:0".parse().expect("addr"))
            .expect("bind");
        // A backlog of 0 leaves room for one connection: the filler takes it.
        let listener = socket.listen(0).expect("listen");
        let addr = listener.local_addr().expect("addr");
        let filler = TcpStream::connect(addr).await.expect("filler connects");
        let outbound = Outbound::new(OutboundConfig {
            policy: AddressPolicy {
                allow_all: true,
                allowed: Vec::new(),
            },
            per_target: 1,
            connect_timeout: Duration::from_secs(10),
            max_redirects: 0,
        })
        .expect("client");
        let url = format!("http://{addr}/orders");
        let started = std::time::Instant::now();
        let sending = outbound.send(Request {
            method: "POST",
            url: &url,
            headers: Default::default(),
            body: bytes::Bytes::from_static(b"order 42"),
            timeout: Duration::from_secs(10),
            timeout_reason: "request timeout",
            keep_body: 4096,
            write_by: started + Duration::from_millis(300),
            max_redirects: None,
            tls: None,
            fresh_connection: false,
        });
        let receiving = async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let (first, _) = listener.accept().await.expect("the filler");
            assert_eq!(first.peer_addr().ok(), filler.local_addr().ok());
            let (mut conn, _) = tokio::time::timeout(Duration::from_secs(5), listener.accept())
                .await
                .expect("the request's connection within 5 s")
                .expect("accept");
            let mut got = Vec::new();
            tokio::time::timeout(Duration::from_secs(5), conn.read_to_end(&mut got))
                .await
                .expect("the client closes within 5 s")
                .expect("read");
            got
        };
        let (sent, got) = tokio::join!(sending, receiving);
        assert!(
            started.elapsed() > Duration::from_millis(800),
            "the connection was made at once: the test proves nothing"
        );
        let err = sent.expect_err("the request is refused");
        assert_eq!(err.code, SendErrorCode::LeaseSpent, "{err:?}");
        assert!(!err.may_have_arrived, "{err:?}");
        assert!(
            got.is_empty(),
            "bytes were written: {:?}",
            String::from_utf8_lossy(&got)
        );
    }
}
