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
