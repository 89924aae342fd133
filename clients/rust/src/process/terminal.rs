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
    use serde_json::Value;

    /// clients/conformance/terminal.json's `resize`: a size in bounds goes on to the request
    /// (here a transport error: no server), one out of them is refused naming its field.
    #[tokio::test]
    async fn conformance_resize() {
        let doc: Value =
            serde_json::from_str(include_str!("../../../conformance/terminal.json")).unwrap();
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let p = crate::Sandbox::new(Client::try_from(config).unwrap(), "ns")
            .process("p")
            .with_start_timeout(Some(std::time::Duration::from_millis(1)));
        for case in crate::conformance::cases(&doc, "resize", 5) {
            let n = |k: &str| u16::try_from(case[k].as_u64().unwrap()).unwrap();
            let got = p.resize(n("rows"), n("cols")).await;
            match (got, case["error"].as_str()) {
                (Err(crate::Error::InvalidArgument { field, .. }), Some(want)) => {
                    assert_eq!(field, want, "{case}")
                }
                (Err(e), None) => assert_ne!(e.code(), "InvalidArgument", "{case}: {e}"),
                (other, _) => panic!("{case}: {other:?}"),
            }
        }
    }
}
