//! The clients' log cursor. Most cursors are the agent's, opaque (just after an event); one that
//! points inside an event (after a log match followed by more bytes in the same read, or a byte
//! limit's cut) is the event's start cursor and a byte count, `<cursor>+<n>`: a client reads
//! from the start cursor and drops those `n` bytes, so a read after any cursor it returned
//! neither repeats nor skips a byte. An empty agent part is the beginning of the output. Both
//! clients run the same cases (`clients/conformance/cursor.json`).

/// A position: the agent's cursor (`None`: the beginning) and bytes to drop after it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    pub agent: Option<String>,
    pub skip: u64,
}

impl Cursor {
    /// Just after an event, at the agent's own cursor.
    pub fn of_agent(agent: String) -> Cursor {
        Cursor {
            agent: Some(agent),
            skip: 0,
        }
    }

    /// `Err` says why `s` is no cursor. A `+` not followed by ASCII digits is part of the
    /// agent's cursor (left to the server to judge).
    pub fn parse(s: &str) -> Result<Cursor, String> {
        if let Some((agent, n)) = s.rsplit_once('+') {
            if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) {
                let skip = n.parse().map_err(|_| format!("{s:?} is not a cursor"))?;
                return Ok(Cursor {
                    agent: (!agent.is_empty()).then(|| agent.to_string()),
                    skip,
                });
            }
        }
        if s.is_empty() {
            return Err("empty cursor".to_string());
        }
        Ok(Cursor {
            agent: Some(s.to_string()),
            skip: 0,
        })
    }

    /// The string form: the agent's cursor alone when nothing is skipped.
    pub fn render(&self) -> String {
        match (&self.agent, self.skip) {
            (Some(a), 0) => a.clone(),
            (a, n) => format!("{}+{n}", a.as_deref().unwrap_or("")),
        }
    }

    /// `n` bytes further into the event that starts here.
    pub fn plus(&self, n: u64) -> Cursor {
        Cursor {
            agent: self.agent.clone(),
            skip: self.skip + n,
        }
    }
}
