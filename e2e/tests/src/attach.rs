//! Reading a streaming attach (the Rust client's `AttachOutput`) in tests: until some bytes
//! appear, or until the exit.
use std::time::Duration;

use anyhow::{bail, Context, Result};
use sandbox_client::{AttachEvent, AttachOutput};

/// Output until `want` appears in it, or the exit, within `within`: what came, and the exit.
pub async fn read_until(
    out: &mut AttachOutput,
    want: Option<&[u8]>,
    within: Duration,
) -> Result<(Vec<u8>, Option<i32>)> {
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    let found = |got: &[u8]| want.is_some_and(|w| got.windows(w.len().max(1)).any(|x| x == w));
    while !found(&got) {
        let ev = tokio::time::timeout_at(deadline, out.next())
            .await
            .with_context(|| {
                let w = want
                    .map(String::from_utf8_lossy)
                    .unwrap_or("the exit".into());
                format!(
                    "no {w:?} in {within:?}; got {} bytes: {:?}",
                    got.len(),
                    String::from_utf8_lossy(&got[got.len().saturating_sub(200)..])
                )
            })?;
        match ev {
            Some(Ok(AttachEvent::Stdout(d) | AttachEvent::Stderr(d))) => got.extend(d),
            Some(Ok(AttachEvent::Exit(code))) => return Ok((got, Some(code))),
            Some(Err(e)) => return Err(e).context("attach output"),
            None => bail!("the attach ended without an exit after {} bytes", got.len()),
        }
    }
    Ok((got, None))
}

/// Output until the exit, within `within`: the bytes and the exit code.
pub async fn to_exit(out: &mut AttachOutput, within: Duration) -> Result<(Vec<u8>, i32)> {
    match read_until(out, None, within).await? {
        (got, Some(code)) => Ok((got, code)),
        (got, None) => bail!("no exit after {} bytes", got.len()),
    }
}
