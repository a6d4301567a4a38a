//! `spoolctl receive`: a small HTTP receiver for trying spoold out. It prints every request it
//! gets and answers it, failing the first few on request (`--fail N`) so that retries can be
//! watched. HTTP/1.1 on one address, in the foreground until Ctrl-C or SIGTERM.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use spool_proto::signing::Secret;

use crate::cli::ReceiveArgs;
use crate::commands::verify::check;
use crate::commands::Exit;
use crate::detail::cut;
use crate::output::Output;

/// The most of a request body that is read (the rest is refused with 413).
const MAX_BODY: usize = 16 << 20;

/// The most of a text body that is printed.
const SHOWN_BODY: usize = 1024;

/// One request, as printed.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Received {
    method: String,
    path: String,
    delivery_id: Option<String>,
    attempt: Option<String>,
    content_type: Option<String>,
    bytes: usize,
    /// The body when it is UTF-8 text (whole in JSON; cut when printed as text).
    body: Option<String>,
    /// With `--secret-file`: `valid`, or why not.
    #[serde(skip_serializing_if = "Option::is_none")]
    signature: Option<String>,
    answered: u16,
}

/// How requests are answered.
struct Answers {
    fail_first: u32,
    fail_status: StatusCode,
    status: StatusCode,
    delay: Option<std::time::Duration>,
    seen: AtomicU32,
    /// `--secret-file`: requests are checked, and one that does not verify is answered 401.
    secret: Option<Secret>,
}

/// How old a signature `receive` accepts, as the specification suggests.
const TOLERANCE_SECS: i64 = 300;

impl Answers {
    /// The status for the next request.
    fn next(&self) -> StatusCode {
        let n = self.seen.fetch_add(1, Ordering::Relaxed);
        if n < self.fail_first {
            self.fail_status
        } else {
            self.status
        }
    }
}

pub async fn run(args: ReceiveArgs, out: &mut Output<'_>) -> anyhow::Result<Exit> {
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let bound = listener.local_addr().context("the bound address")?;
    let status = |code: u16| StatusCode::from_u16(code).context("an HTTP status");
    let answers = Arc::new(Answers {
        fail_first: args.fail,
        fail_status: status(args.fail_status)?,
        status: status(args.status)?,
        delay: args.delay,
        seen: AtomicU32::new(0),
        secret: args
            .secret_file
            .as_deref()
            .map(crate::commands::verify::read_secret)
            .transpose()?,
    });
    eprintln!("spoolctl: receiving on http://{bound} (Ctrl-C stops it)");
    let (tx, mut rx) = mpsc::unbounded_channel::<Received>();
    let mut stop = stop_signals()?;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let (answers, tx) = (Arc::clone(&answers), tx.clone());
                tokio::spawn(async move {
                    let service = service_fn(move |req| {
                        answer(req, Arc::clone(&answers), tx.clone())
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            Some(received) = rx.recv() => {
                print(out, &received)?;
            }
            () = stop.next() => break,
        }
    }
    Ok(Exit::Success)
}

async fn answer(
    req: Request<Incoming>,
    answers: Arc<Answers>,
    printed: mpsc::UnboundedSender<Received>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (delivery_id, attempt, content_type) = (
        header(spool_proto::DELIVERY_ID_HEADER),
        header(spool_proto::ATTEMPT_HEADER),
        header("content-type"),
    );
    let method = req.method().to_string();
    let path = req
        .uri()
        .path_and_query()
        .map_or_else(|| "/".to_owned(), |p| p.to_string());
    let (parts, body) = req.into_parts();
    let body = match http_body_util::Limited::new(body, MAX_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => return Ok(reply(StatusCode::PAYLOAD_TOO_LARGE)),
    };
    let signature = answers.secret.as_ref().map(|secret| {
        let now = crate::output::now_ms() / 1000;
        let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
        check(secret, header, &body, now, Some(TOLERANCE_SECS))
    });
    let status = match &signature {
        Some(Err(_)) => StatusCode::UNAUTHORIZED,
        _ => answers.next(),
    };
    if let Some(delay) = answers.delay {
        tokio::time::sleep(delay).await;
    }
    let _ = printed.send(Received {
        method,
        path,
        delivery_id,
        attempt,
        content_type,
        bytes: body.len(),
        body: std::str::from_utf8(&body).ok().map(str::to_owned),
        signature: signature.map(|s| match s {
            Ok(_) => "valid".to_owned(),
            Err(e) => format!("invalid: {e}"),
        }),
        answered: status.as_u16(),
    });
    Ok(reply(status))
}

fn reply(status: StatusCode) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = status;
    response
}

/// One request: a line of what it was, then its text body (cut), indented.
fn print(out: &mut Output<'_>, r: &Received) -> anyhow::Result<()> {
    if out.is_json() {
        out.json(r)?;
        return Ok(out.flush()?);
    }
    let mut line = format!("{} {}", r.method, r.path);
    if let Some(id) = &r.delivery_id {
        line.push_str(&format!("  delivery {id}"));
    }
    if let Some(n) = &r.attempt {
        line.push_str(&format!("  attempt {n}"));
    }
    if let Some(t) = &r.content_type {
        line.push_str(&format!("  {t}"));
    }
    line.push_str(&format!("  {} bytes", r.bytes));
    if let Some(signature) = &r.signature {
        line.push_str(&format!("  signature {signature}"));
    }
    line.push_str(&format!("  -> {}", r.answered));
    out.line(&line)?;
    match &r.body {
        Some(text) if !text.is_empty() => {
            let shown = cut(text, SHOWN_BODY);
            for body_line in shown.lines() {
                out.line(&format!("  {body_line}"))?;
            }
            if shown.len() < text.len() {
                out.line(&format!("  [… {} more bytes]", text.len() - shown.len()))?;
            }
        }
        Some(_) => {}
        None => out.line(&format!("  [{} bytes, not text]", r.bytes))?,
    }
    Ok(out.flush()?)
}

/// SIGINT (Ctrl-C) and SIGTERM.
struct StopSignals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl StopSignals {
    async fn next(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
        }
    }
}

fn stop_signals() -> anyhow::Result<StopSignals> {
    use tokio::signal::unix::{signal, SignalKind};
    Ok(StopSignals {
        int: signal(SignalKind::interrupt()).context("handle SIGINT")?,
        term: signal(SignalKind::terminate()).context("handle SIGTERM")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_answers_fail_as_asked() {
        let answers = Answers {
            fail_first: 2,
            fail_status: StatusCode::SERVICE_UNAVAILABLE,
            status: StatusCode::OK,
            delay: None,
            seen: AtomicU32::new(0),
            secret: None,
        };
        let got: Vec<u16> = (0..4).map(|_| answers.next().as_u16()).collect();
        assert_eq!(got, [503, 503, 200, 200]);
    }
}
