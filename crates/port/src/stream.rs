//! A client's connection to a front end, plain TCP or TLS: one type the protocols read
//! and write whichever the listener was given.
//!
//! Splitting a plain stream gives the socket's own halves (no lock between them); a TLS
//! stream's halves share the session through tokio's `split`.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf, ReadHalf, WriteHalf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// A front end's connection.
pub enum EdgeStream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// The reading half of a split [`EdgeStream`].
pub enum EdgeRead {
    Plain(OwnedReadHalf),
    Tls(ReadHalf<Box<TlsStream<TcpStream>>>),
}

/// The writing half of a split [`EdgeStream`].
pub enum EdgeWrite {
    Plain(OwnedWriteHalf),
    Tls(WriteHalf<Box<TlsStream<TcpStream>>>),
}

impl EdgeStream {
    /// Whether the connection is TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self, EdgeStream::Tls(_))
    }

    /// Halves a reader and a writer task can own.
    pub fn into_split(self) -> (EdgeRead, EdgeWrite) {
        match self {
            EdgeStream::Plain(stream) => {
                let (read, write) = stream.into_split();
                (EdgeRead::Plain(read), EdgeWrite::Plain(write))
            }
            EdgeStream::Tls(stream) => {
                let (read, write) = tokio::io::split(stream);
                (EdgeRead::Tls(read), EdgeWrite::Tls(write))
            }
        }
    }
}

/// Forwards an `AsyncRead` call to whichever variant `$self` is.
macro_rules! either {
    ($self:expr, $inner:ident => $call:expr) => {
        match $self.get_mut() {
            Self::Plain($inner) => $call,
            Self::Tls($inner) => $call,
        }
    };
}

impl AsyncRead for EdgeStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        either!(self, s => Pin::new(s).poll_read(cx, buf))
    }
}

impl AsyncRead for EdgeRead {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        either!(self, s => Pin::new(s).poll_read(cx, buf))
    }
}

/// `AsyncWrite` for a two-variant enum whose variants are each `AsyncWrite + Unpin`.
macro_rules! impl_write {
    ($type:ty) => {
        impl AsyncWrite for $type {
            fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
                either!(self, s => Pin::new(s).poll_write(cx, buf))
            }

            fn poll_write_vectored(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                bufs: &[io::IoSlice<'_>],
            ) -> Poll<io::Result<usize>> {
                either!(self, s => Pin::new(s).poll_write_vectored(cx, bufs))
            }

            fn is_write_vectored(&self) -> bool {
                match self {
                    Self::Plain(s) => s.is_write_vectored(),
                    Self::Tls(s) => s.is_write_vectored(),
                }
            }

            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                either!(self, s => Pin::new(s).poll_flush(cx))
            }

            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                either!(self, s => Pin::new(s).poll_shutdown(cx))
            }
        }
    };
}

impl_write!(EdgeStream);
impl_write!(EdgeWrite);
