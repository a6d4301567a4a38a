//! A TCP proxy on 127.0.0.1 that a test can pause: while paused it forwards nothing in either
//! direction and makes no new upstream connection, but keeps every connection open, as a
//! server that stopped answering (or a network that dropped every packet) would; resumed, it
//! goes on where it stopped. For a daemon that loses its database without its connections
//! breaking. Dropping the proxy drops every connection.

use std::net::{Ipv4Addr, SocketAddr};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

/// A running proxy to one upstream address.
pub struct Proxy {
    addr: SocketAddr,
    paused: watch::Sender<bool>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Listen on 127.0.0.1 (a port of the OS's choosing) and forward to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let (paused, watch) = watch::channel(false);
        let accept = tokio::spawn(async move {
            // Owned here: aborting this task drops every connection's task with it.
            let mut connections = JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                connections.spawn(forward(client, upstream, watch.clone()));
                while connections.try_join_next().is_some() {}
            }
        });
        Ok(Proxy {
            addr,
            paused,
            accept,
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop forwarding (and connecting) until [`Proxy::resume`].
    pub fn pause(&self) {
        let _ = self.paused.send(true);
    }

    pub fn resume(&self) {
        let _ = self.paused.send(false);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// One connection: connect upstream once not paused, then copy both ways, each piece only
/// while not paused.
async fn forward(client: TcpStream, upstream: SocketAddr, mut paused: watch::Receiver<bool>) {
    if unpaused(&mut paused).await.is_err() {
        return;
    }
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::select! {
        () = copy(client_read, server_write, paused.clone()) => {}
        () = copy(server_read, client_write, paused) => {}
    }
}

async fn copy(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut paused: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if unpaused(&mut paused).await.is_err() || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// Until the proxy is not paused (`Err`: the proxy is gone).
async fn unpaused(paused: &mut watch::Receiver<bool>) -> Result<(), watch::error::RecvError> {
    paused.wait_for(|p| !p).await.map(drop)
}
