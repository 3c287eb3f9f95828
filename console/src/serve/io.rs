//! A connection's socket shared between hyper, which reads and writes it, and the accept loop,
//! which only peeks at it (does it hold bytes the server has not read yet?) when it must choose
//! a connection to close. The connection's task holds the only strong reference: when hyper
//! drops the connection the socket closes, whatever the accept loop still remembers of it.

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// The socket as hyper uses it.
pub(crate) struct SharedStream(pub(crate) Arc<TcpStream>);

impl AsyncRead for SharedStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        loop {
            ready!(self.0.poll_read_ready(cx))?;
            match self.0.try_read(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                // The readiness was stale: it is cleared, so the next poll waits for new data.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for SharedStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.0.poll_write_ready(cx))?;
            match self.0.try_write(buf) {
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Writes go straight to the socket: nothing is buffered here.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        let result = socket2::SockRef::from(&*self.0).shutdown(std::net::Shutdown::Write);
        // Already closed by the peer: nothing left to shut.
        Poll::Ready(match result {
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(()),
            other => other,
        })
    }
}

/// What a connection's socket holds that the server has not read, as the accept loop sees it
/// without disturbing hyper (a non-blocking `MSG_PEEK`: nothing is consumed, no waker is
/// registered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pending {
    /// Bytes the client sent are waiting to be read: it is speaking, leave it be.
    Bytes,
    /// Nothing waiting.
    Nothing,
    /// The client closed its side, or the socket failed: nothing more will come.
    Gone,
}

/// Peeks at `stream`.
pub(crate) fn pending(stream: &TcpStream) -> Pending {
    let mut byte = [MaybeUninit::<u8>::uninit()];
    match socket2::SockRef::from(stream).peek(&mut byte) {
        Ok(0) => Pending::Gone,
        Ok(_) => Pending::Bytes,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Pending::Nothing,
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Pending::Nothing,
        Err(_) => Pending::Gone,
    }
}
