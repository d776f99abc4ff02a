//! The stdio transport of an MCP server the runner starts: the child process (its own process
//! group) and the SDK's line transport over its stdin and stdout, with the size of each message
//! the server sends measured on the way in ([`SizedLines`]).
//!
//! Why not the SDK's own child transport: it drops a line over its limit, logs it and reads on,
//! so the call that line answered waits for its deadline and then blames the server for not
//! answering. Here a line over [`MAX_LINE_BYTES`] is counted to its end (never buffered) and
//! replaced by an error answer to the same request id, with `data.kind` `too_large` and the
//! size, so the call fails at once saying how large the result was, and the session stays up
//! for the next call.

use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use process_wrap::tokio::{ChildWrapper, CommandWrap};
use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};

use suzumio_core::toolpack::output::{MAX_RESULT_BYTES, too_large};

/// The longest message taken from a server: a result must fit one result's limit.
pub(crate) const MAX_LINE_BYTES: usize = MAX_RESULT_BYTES;

/// How long closing waits for the server to exit on its own before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(3);

/// An MCP server's child process and the transport over its pipes.
pub(crate) struct ChildTransport {
    child: Option<Box<dyn ChildWrapper>>,
    transport: AsyncRwTransport<RoleClient, SizedLines<ChildStdout>, ChildStdin>,
}

impl ChildTransport {
    /// Start `command` with piped stdin, stdout and stderr; the stderr is the caller's to read.
    pub(crate) fn spawn(mut command: CommandWrap) -> std::io::Result<(ChildTransport, Option<ChildStderr>)> {
        use std::process::Stdio;
        command.command_mut().stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        // Spawned under the reaper's lock: tokio waits for this child, the reaper must not.
        let spawning = crate::reaper::spawning();
        let mut child = command.spawn()?;
        spawning.own(child.id());
        let missing = |what: &str| std::io::Error::other(format!("the server's {what} is not a pipe"));
        let stdin = child.inner_mut().stdin().take().ok_or_else(|| missing("stdin"))?;
        let stdout = child.inner_mut().stdout().take().ok_or_else(|| missing("stdout"))?;
        let stderr = child.inner_mut().stderr().take();
        // Our reader never hands on a line over MAX_LINE_BYTES: the SDK's own limit stays out of it.
        let transport =
            AsyncRwTransport::new(SizedLines::new(stdout, MAX_LINE_BYTES), stdin).with_max_line_length(usize::MAX);
        Ok((ChildTransport { child: Some(child), transport }, stderr))
    }
}

impl Transport<RoleClient> for ChildTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.transport.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.transport.receive()
    }

    /// As the MCP stdio shutdown says: close its stdin, give it a moment to exit, then kill it
    /// (its whole process group).
    async fn close(&mut self) -> Result<(), Self::Error> {
        self.transport.close().await?;
        let Some(mut child) = self.child.take() else { return Ok(()) };
        if tokio::time::timeout(EXIT_GRACE, child.wait()).await.is_err() {
            Box::into_pin(child.kill()).await?;
        }
        Ok(())
    }
}

impl Drop for ChildTransport {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move {
                if let Err(e) = Box::into_pin(child.kill()).await {
                    tracing::warn!("cannot kill an MCP server: {e}");
                }
            });
        }
    }
}

/// The server's stdout, line by line: a line is handed on once it is whole and at most `limit`
/// bytes; a longer one is counted to its newline and handed on as an error answer to its
/// request (see the module header).
pub(crate) struct SizedLines<R> {
    inner: R,
    limit: usize,
    /// The line being read.
    line: Vec<u8>,
    /// Whole lines ready for the reader, from `ready_at` on.
    ready: Vec<u8>,
    ready_at: usize,
    /// The size so far of a line that passed the limit.
    oversized: Option<usize>,
    id: TopLevelId,
    chunk: Box<[u8]>,
}

impl<R> SizedLines<R> {
    pub(crate) fn new(inner: R, limit: usize) -> SizedLines<R> {
        SizedLines {
            inner,
            limit,
            line: Vec::new(),
            ready: Vec::new(),
            ready_at: 0,
            oversized: None,
            id: TopLevelId::default(),
            chunk: vec![0; 64 << 10].into_boxed_slice(),
        }
    }

    /// Take in what was read; whole lines go to `ready`.
    fn take(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let (piece, whole) = match bytes.iter().position(|b| *b == b'\n') {
                Some(end) => (&bytes[..end], true),
                None => (bytes, false),
            };
            self.id.feed(piece);
            match &mut self.oversized {
                Some(size) => *size += piece.len(),
                None if self.line.len() + piece.len() > self.limit => {
                    self.oversized = Some(self.line.len() + piece.len());
                    self.line = Vec::new();
                }
                None => self.line.extend_from_slice(piece),
            }
            bytes = &bytes[piece.len() + usize::from(whole)..];
            if whole {
                self.end_line();
            }
        }
    }

    fn end_line(&mut self) {
        match self.oversized.take() {
            None => {
                self.ready.extend_from_slice(&self.line);
                self.ready.push(b'\n');
                self.line.clear();
            }
            Some(size) => match self.id.found() {
                Some(id) => {
                    tracing::warn!(bytes = size, limit = self.limit, "an MCP server's answer is over the size limit");
                    let answer = json!({"jsonrpc": "2.0", "id": id, "error": {
                        "code": -32603,
                        "message": too_large(size, self.limit),
                        "data": {"kind": "too_large", "bytes": size, "limit": self.limit},
                    }});
                    self.ready.extend_from_slice(answer.to_string().as_bytes());
                    self.ready.push(b'\n');
                }
                // Nothing waits for a message without an id (a notification): it is only lost.
                None => tracing::warn!(bytes = size, "dropped a message of an MCP server over the size limit"),
            },
        }
        self.id = TopLevelId::default();
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for SizedLines<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.ready_at < this.ready.len() {
                let n = out.remaining().min(this.ready.len() - this.ready_at);
                out.put_slice(&this.ready[this.ready_at..this.ready_at + n]);
                this.ready_at += n;
                if this.ready_at == this.ready.len() {
                    this.ready.clear();
                    this.ready_at = 0;
                }
                return Poll::Ready(Ok(()));
            }
            let mut buf = ReadBuf::new(&mut this.chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut buf))?;
            let n = buf.filled().len();
            if n == 0 {
                // The end: a last line without its newline is not a message.
                return Poll::Ready(Ok(()));
            }
            let chunk = std::mem::take(&mut this.chunk);
            this.take(&chunk[..n]);
            this.chunk = chunk;
        }
    }
}

/// Finds the value of the top-level `"id"` of one JSON object as its bytes go by, without
/// keeping them: enough of JSON's grammar (strings, nesting) to tell the top-level key from
/// the same text inside the result.
#[derive(Default)]
struct TopLevelId {
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// At depth 1, where a key may start.
    expect_key: bool,
    /// The key being read (at depth 1), and the last one read.
    key: Option<Vec<u8>>,
    last_key: Vec<u8>,
    /// The raw text of the id's value while it is read.
    value: Option<Vec<u8>>,
    found: Option<Vec<u8>>,
}

/// Longer ids or keys are not what a JSON-RPC client sends.
const MAX_ID_BYTES: usize = 256;

impl TopLevelId {
    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if self.found.is_some() {
                return;
            }
            self.byte(b);
        }
    }

    fn byte(&mut self, b: u8) {
        if let Some(value) = &mut self.value
            && value.len() < MAX_ID_BYTES
            && !(self.depth == 1 && !self.in_string && (b == b',' || b == b'}'))
        {
            value.push(b);
        }
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
                if let Some(key) = self.key.take() {
                    self.last_key = key;
                }
                return;
            }
            if let Some(key) = &mut self.key
                && key.len() < MAX_ID_BYTES
            {
                key.push(b);
            }
            return;
        }
        match b {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.expect_key && self.value.is_none() {
                    self.key = Some(Vec::new());
                    self.expect_key = false;
                }
            }
            b'{' | b'[' => {
                self.depth += 1;
                if self.depth == 1 {
                    self.expect_key = true;
                }
            }
            b':' if self.depth == 1 && self.value.is_none() && self.last_key == b"id" => self.value = Some(Vec::new()),
            b',' | b'}' if self.depth == 1 => {
                if let Some(value) = self.value.take() {
                    self.found = Some(value);
                }
                self.expect_key = true;
                if b == b'}' {
                    self.depth -= 1;
                }
            }
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            _ => {}
        }
    }

    /// The id, when it was found and is a number or a string.
    fn found(&self) -> Option<Value> {
        let value: Value = serde_json::from_slice(self.found.as_deref()?).ok()?;
        (value.is_number() || value.is_string()).then_some(value)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    fn id_of(text: &str) -> Option<Value> {
        let mut scanner = TopLevelId::default();
        scanner.feed(text.as_bytes());
        scanner.found()
    }

    #[test]
    fn the_top_level_id_is_found_wherever_it_is_and_not_inside_the_result() {
        assert_eq!(id_of(r#"{"jsonrpc":"2.0","id":7,"result":{"id":99}}"#), Some(json!(7)));
        assert_eq!(
            id_of(r#"{"result":{"content":[{"text":"\"id\":5,"}]},"id":"a,b}", "jsonrpc":"2.0"}"#),
            Some(json!("a,b}"))
        );
        assert_eq!(id_of(r#"{ "id" : 12 }"#), Some(json!(12)));
        assert_eq!(id_of(r#"{"jsonrpc":"2.0","method":"notifications/x","params":{"id":3}}"#), None);
    }

    async fn read_all(input: Vec<u8>, limit: usize) -> String {
        let mut reader = SizedLines::new(&input[..], limit);
        let mut out = String::new();
        reader.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn a_line_over_the_limit_becomes_an_error_answer_with_its_size_and_the_next_line_passes() {
        let big = format!("{{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{{\"text\":\"{}\"}}}}\n", "x".repeat(300_000));
        let small = "{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{}}\n";
        let out = read_all(format!("{small}{big}{small}").into_bytes(), 100_000).await;
        let lines: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert_eq!(lines[0]["id"], 5);
        assert_eq!(lines[1]["id"], 4);
        assert_eq!(lines[1]["error"]["data"]["kind"], "too_large");
        assert_eq!(lines[1]["error"]["data"]["bytes"], big.len() - 1);
        assert_eq!(
            lines[1]["error"]["message"],
            "result of 0.3 MB exceeds the limit of 0.1 MB; ask for less (a part, a page, a summary)"
        );
        assert_eq!(lines[2]["id"], 5);
    }
}
