//! The HTTP floor's process: a bare axum handler (the axum spoold uses, with spoold's
//! features) on 127.0.0.1 that reads the request body and answers 201 with nothing, on a
//! runtime built as spoold's. What is left of a create here is what any HTTP/1.1 server on
//! this stack pays: accept, parse the head, route, read the body, write the response.

use std::io::{BufRead as _, Write as _};
use std::net::Ipv4Addr;

use anyhow::Context as _;
use axum::routing::post;
use bytes::Bytes;
use http::StatusCode;

/// Serve until stdin closes.
pub fn serve() -> anyhow::Result<()> {
    let runtime = super::runtime()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .context("bind 127.0.0.1:0")?;
        let addr = listener.local_addr().context("bound address")?;
        let router = axum::Router::new()
            .route("/v1/deliveries", post(accept))
            .route("/v1/tasks", post(accept));
        let (closed_tx, closed_rx) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("floor-stdin".into())
            .spawn(move || {
                let mut line = String::new();
                let mut stdin = std::io::stdin().lock();
                while stdin.read_line(&mut line).is_ok_and(|n| n > 0) {
                    line.clear();
                }
                let _ = closed_tx.send(());
            })
            .context("start the stdin thread")?;
        let server = tokio::spawn(async move { axum::serve(listener, router).await });
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "ready {addr}").context("write to stdout")?;
        stdout.flush().context("write to stdout")?;
        drop(stdout);
        let _ = closed_rx.await;
        server.abort();
        anyhow::Ok(())
    })
}

/// Read the body, answer 201.
async fn accept(body: Bytes) -> StatusCode {
    drop(body);
    StatusCode::CREATED
}
