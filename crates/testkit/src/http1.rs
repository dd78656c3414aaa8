//! A raw HTTP/1.1 client connection ([`RawConnection`]) for tests about the connection itself:
//! keep-alive across requests, `Connection: close`, how the server ends a connection. Requests
//! are written byte for byte on one `TcpStream`; responses are read framed by `Content-Length`
//! or chunked encoding (or to the end of the stream when they have neither), as a client does.
//!
//! Invariants: one request at a time (no pipelining); every read has a deadline
//! ([`READ_TIMEOUT`]), so a server that never answers fails the test instead of hanging it;
//! nothing here sleeps.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// How long any read waits for the server.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// One client connection speaking raw HTTP/1.1.
#[derive(Debug)]
pub struct RawConnection {
    stream: BufReader<TcpStream>,
}

/// A response as read off the wire.
#[derive(Debug, Clone)]
pub struct RawResponse {
    pub status: u16,
    /// Header names lower-cased, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawResponse {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    /// Whether the response says `Connection: close`.
    pub fn closes(&self) -> bool {
        self.headers
            .iter()
            .filter(|(key, _)| key == "connection")
            .flat_map(|(_, value)| value.split(','))
            .any(|token| token.trim().eq_ignore_ascii_case("close"))
    }

    /// The body as text (lossy UTF-8).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

impl RawConnection {
    /// Opens a connection to `addr`.
    pub async fn connect(addr: SocketAddr) -> io::Result<RawConnection> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(RawConnection {
            stream: BufReader::new(stream),
        })
    }

    /// Writes one request: the request line, `Host`, `headers`, and `Content-Length` of `body`
    /// when it is not empty. When `headers` name a `Content-Length` or `Transfer-Encoding`
    /// themselves, `body` is sent as given (already encoded, or only a part of what was
    /// announced).
    pub async fn send(
        &mut self,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> io::Result<()> {
        let mut head = format!("{method} {target} HTTP/1.1\r\nHost: localhost\r\n");
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        let framed = headers.iter().any(|(name, _)| {
            name.eq_ignore_ascii_case("transfer-encoding")
                || name.eq_ignore_ascii_case("content-length")
        });
        if !body.is_empty() && !framed {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        let stream = self.stream.get_mut();
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body).await?;
        stream.flush().await
    }

    /// Reads one response. An error when the server closed (or reset) the connection before a
    /// whole response arrived, or when none arrived within [`READ_TIMEOUT`].
    pub async fn read_response(&mut self) -> io::Result<RawResponse> {
        tokio::time::timeout(READ_TIMEOUT, self.read_response_now())
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no response in time"))?
    }

    /// [`RawConnection::send`] then [`RawConnection::read_response`].
    pub async fn request(
        &mut self,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> io::Result<RawResponse> {
        self.send(method, target, headers, body).await?;
        self.read_response().await
    }

    /// Waits for the server to close the connection: `Ok` on an orderly close (end of stream),
    /// an error on a reset, on more bytes, or when it stays open past [`READ_TIMEOUT`].
    pub async fn expect_closed(&mut self) -> io::Result<()> {
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(READ_TIMEOUT, self.stream.read(&mut byte))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "still open"))??;
        if read == 0 {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "bytes after the last response",
            ))
        }
    }

    async fn read_response_now(&mut self) -> io::Result<RawResponse> {
        let status_line = self.read_line().await?;
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse::<u16>().ok())
            .ok_or_else(|| invalid(format!("bad status line {status_line:?}")))?;
        let mut headers = Vec::new();
        loop {
            let line = self.read_line().await?;
            if line.is_empty() {
                break;
            }
            let (name, value) = line
                .split_once(':')
                .ok_or_else(|| invalid(format!("bad header line {line:?}")))?;
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
        let mut response = RawResponse {
            status,
            headers,
            body: Vec::new(),
        };
        if (100..200).contains(&status) {
            // An interim answer (`100 Continue`); the caller reads the final one next.
            return Ok(response);
        }
        if status == 204 || status == 304 {
            return Ok(response);
        }
        let chunked = response
            .header("transfer-encoding")
            .is_some_and(|value| value.eq_ignore_ascii_case("chunked"));
        if chunked {
            response.body = self.read_chunked().await?;
        } else if let Some(length) = response.header("content-length") {
            let length: usize = length
                .parse()
                .map_err(|_| invalid(format!("bad content-length {length:?}")))?;
            let mut body = vec![0u8; length];
            self.stream.read_exact(&mut body).await?;
            response.body = body;
        } else {
            self.stream.read_to_end(&mut response.body).await?;
        }
        Ok(response)
    }

    async fn read_chunked(&mut self) -> io::Result<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let size_line = self.read_line().await?;
            let size = size_line.split(';').next().unwrap_or_default().trim();
            let size = usize::from_str_radix(size, 16)
                .map_err(|_| invalid(format!("bad chunk size {size_line:?}")))?;
            if size == 0 {
                // Trailers, then the empty line.
                while !self.read_line().await?.is_empty() {}
                return Ok(body);
            }
            let start = body.len();
            body.resize(start + size, 0);
            self.stream.read_exact(&mut body[start..]).await?;
            if !self.read_line().await?.is_empty() {
                return Err(invalid("chunk not followed by CRLF".to_owned()));
            }
        }
    }

    /// One line without its CRLF; an `UnexpectedEof` error at the end of the stream.
    async fn read_line(&mut self) -> io::Result<String> {
        let mut line = String::new();
        if self.stream.read_line(&mut line).await? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            ));
        }
        let trimmed = line.trim_end_matches(['\r', '\n']).len();
        line.truncate(trimmed);
        Ok(line)
    }
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}
