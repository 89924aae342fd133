//! The terminal of a `tty` process: its window size.
use sandbox_api::wire::TerminalSize;

use super::Process;
use crate::error::{Error, Result};

impl Process {
    /// Gives its terminal a new window size (the process is told: SIGWINCH); the size set.
    /// Needs [`crate::Start::tty`]; waits for the start like the other calls.
    pub async fn resize(&self, rows: u16, cols: u16) -> Result<TerminalSize> {
        let size = TerminalSize { rows, cols };
        // The subresource names its fields `rows` and `cols`.
        size.check()
            .map_err(|(field, m)| Error::invalid(field.trim_start_matches("terminal."), m))?;
        self.ensure_started("resize", self.start_timeout).await?;
        let body = serde_json::to_vec(&size).expect("json");
        let req = http::Request::post(self.url("resize"))
            .header("content-type", "application/json")
            .body(body)
            .map_err(|e| Error::invalid("name", e.to_string()))?;
        Ok(self.client.request(req).await?)
    }
}

#[cfg(test)]
mod tests {
    use kube::Client;

    /// A size out of bounds is refused naming the subresource's field, before any request
    /// (the client's address has no server: a request would be a transport error).
    #[tokio::test]
    async fn a_bad_size_never_leaves_the_client() {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let p = crate::Sandbox::new(Client::try_from(config).unwrap(), "ns").process("p");
        for (rows, cols, field) in [(0, 80, "rows"), (1001, 80, "rows"), (24, 10001, "cols")] {
            match p.resize(rows, cols).await {
                Err(crate::Error::InvalidArgument { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{rows}x{cols}: {other:?}"),
            }
        }
    }
}
