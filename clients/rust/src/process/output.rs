//! A process's output through its handle: the event stream, a wait for a matching line, and
//! the whole output at the end.
use std::time::{Duration, Instant};

use futures::Stream;
use sandbox_api::crd::LogStream;

use super::Process;
use crate::error::{Error, Result};
use crate::logs::{self, LogEvent, LogOptions, Read, Reader};
use crate::state::{exit_of, is_final, never_started, Exit};

/// What [`Process::wait_for_log`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogMatch {
    /// The stream of the matched line.
    pub stream: LogStream,
    /// The matched line, without its newline (UTF-8, invalid bytes replaced).
    pub line: String,
    /// Just after the matched line: [`LogOptions::after`] reads on from there.
    pub cursor: String,
}

/// What [`Process::output`] collected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Output {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit: Exit,
    /// Some output is missing: dropped by the node's retention cap, or beyond `max_bytes`.
    pub truncated: bool,
}

impl Process {
    /// Its output as a stream of events, from `o.after` (or the beginning); with `o.follow`,
    /// until the process ends (a lost connection is resumed by cursor). Ends with `End`.
    ///
    /// ```no_run
    /// # async fn demo(p: sandbox_client::Process) -> Result<(), sandbox_client::Error> {
    /// use futures::StreamExt;
    /// use sandbox_client::{LogEvent, LogOptions};
    ///
    /// let mut events = Box::pin(p.logs(LogOptions { follow: true, ..Default::default() }));
    /// let mut last = None;
    /// while let Some(ev) = events.next().await {
    ///     match ev? {
    ///         LogEvent::Data { data, cursor, .. } => {
    ///             print!("{}", String::from_utf8_lossy(&data));
    ///             last = Some(cursor); // keep it: `after: last` resumes here, from anywhere
    ///         }
    ///         LogEvent::Truncated { dropped_bytes, .. } => eprintln!("[{dropped_bytes} bytes dropped]"),
    ///         LogEvent::End { .. } => break,
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn logs(&self, o: LogOptions) -> impl Stream<Item = Result<LogEvent>> + Send + 'static {
        let this = self.clone();
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<LogEvent>>(16);
        tokio::spawn(async move {
            let mut reader = match this.reader(&o).await {
                Ok(r) => r,
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            };
            loop {
                // A dropped stream ends the read at once, not at the next event (a quiet
                // follow would otherwise hold its connection and the agent's follow slot).
                let next = tokio::select! {
                    n = logs::next_public(&mut reader) => n,
                    _ = tx.closed() => return,
                };
                let next = match next {
                    Err(e) => Err(this.explain(e).await),
                    other => other,
                };
                match next {
                    Ok(Some(ev)) => {
                        if tx.send(Ok(ev)).await.is_err() {
                            return; // the stream was dropped
                        }
                    }
                    Ok(None) => return,
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                }
            }
        });
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|v| (v, rx)) })
    }

    /// A reader, once the process has started (only a started process has output).
    async fn reader(&self, o: &LogOptions) -> Result<Reader> {
        let r = Reader::new(
            self.client.clone(),
            self.door,
            &self.namespace,
            &self.name,
            o,
        )?;
        self.ensure_started("logs", self.start_timeout).await?;
        Ok(r)
    }

    /// A failed read, explained by the object when the process never started: its
    /// `status.error` rather than the subresource's "no process".
    async fn explain(&self, e: Error) -> Error {
        if !matches!(e, Error::Api { .. } | Error::StreamBroken { .. }) {
            return e;
        }
        match self
            .door
            .get(&self.client, &self.namespace, &self.name)
            .await
        {
            Ok(Some(o)) => never_started(&o).unwrap_or(e),
            _ => e,
        }
    }

    /// Waits until a complete line of its output (from `after`, or the beginning) matches the
    /// regular expression `pattern` (regex-lite syntax, like `readiness.logMatch`); the line and
    /// a cursor just after it. Ending first is [`Error::ExitedBeforeLog`].
    pub async fn wait_for_log(
        &self,
        pattern: &str,
        stream: LogStream,
        after: Option<String>,
        timeout: Option<Duration>,
    ) -> Result<LogMatch> {
        let re = regex_lite::Regex::new(pattern)
            .map_err(|e| Error::invalid("pattern", e.to_string()))?;
        let begun = Instant::now();
        self.ensure_started("wait_for_log", timeout).await?;
        let fut = self.find_line(&re, stream, after);
        self.within("log a matching line", timeout, begun, fut)
            .await
    }

    async fn find_line(
        &self,
        re: &regex_lite::Regex,
        stream: LogStream,
        after: Option<String>,
    ) -> Result<LogMatch> {
        let o = LogOptions {
            follow: true,
            after,
            stream,
            limit_bytes: None,
            previous: false,
        };
        let mut reader = self.reader(&o).await?;
        let mut lines = logs::Lines2::default();
        let matches = |line: &[u8]| re.is_match(&String::from_utf8_lossy(line));
        loop {
            let ev = match reader.next().await {
                Ok(Some(ev)) => ev,
                Ok(None) => unreachable!("a follow ends with End"),
                Err(e) => return Err(self.explain(e).await),
            };
            match ev {
                Read::Data {
                    stream,
                    data,
                    start,
                    cursor,
                    ..
                } => {
                    let mut found = None;
                    let end = lines.feed(stream, &data, |line| {
                        let hit = matches(line);
                        if hit {
                            found = Some(String::from_utf8_lossy(line).into_owned());
                        }
                        hit
                    });
                    if let (Some(end), Some(line)) = (end, found) {
                        let cursor = if end == data.len() {
                            cursor
                        } else {
                            start.plus(end as u64).render()
                        };
                        return Ok(LogMatch {
                            stream,
                            line,
                            cursor,
                        });
                    }
                }
                Read::Truncated { .. } => lines.gap(),
                Read::End { cursor, .. } => {
                    // The output is complete: a last line without a newline counts now.
                    let mut found = None;
                    lines.finish(|s, line| {
                        let hit = matches(line);
                        if hit {
                            found = Some((s, String::from_utf8_lossy(line).into_owned()));
                        }
                        hit
                    });
                    return match found {
                        Some((stream, line)) => Ok(LogMatch {
                            stream,
                            line,
                            cursor: cursor.render(),
                        }),
                        None => Err(Error::ExitedBeforeLog {
                            name: self.name.clone(),
                            pattern: re.as_str().to_string(),
                        }),
                    };
                }
            }
        }
    }

    /// Waits for the end, then its whole retained output and how it ended. `max_bytes` bounds
    /// what is kept per stream (beyond it, `truncated`); a timeout ends only this wait.
    pub async fn output(
        &self,
        max_bytes: Option<usize>,
        timeout: Option<Duration>,
    ) -> Result<Output> {
        let begun = Instant::now();
        self.ensure_started("output", timeout).await?;
        self.within("end", timeout, begun, self.collect(max_bytes))
            .await
    }

    async fn collect(&self, max_bytes: Option<usize>) -> Result<Output> {
        let mut reader = self
            .reader(&LogOptions {
                follow: true,
                ..Default::default()
            })
            .await?;
        let (mut stdout, mut stderr, mut truncated) = (Vec::new(), Vec::new(), false);
        let cap = max_bytes.unwrap_or(usize::MAX);
        loop {
            match reader.next().await {
                Ok(Some(Read::Data { stream, data, .. })) => {
                    let buf = if stream == LogStream::Stderr {
                        &mut stderr
                    } else {
                        &mut stdout
                    };
                    let room = cap.saturating_sub(buf.len());
                    if data.len() > room {
                        truncated = true;
                    }
                    buf.extend_from_slice(&data[..room.min(data.len())]);
                }
                Ok(Some(Read::Truncated { .. })) => truncated = true,
                Ok(Some(Read::End { .. })) | Ok(None) => break,
                Err(e) => return Err(self.explain(e).await),
            }
        }
        let done = self.until(None, "end", is_final).await?;
        Ok(Output {
            stdout,
            stderr,
            exit: exit_of(&done)?,
            truncated,
        })
    }
}
