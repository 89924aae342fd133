//! Durable records: written with temp file + fsync + rename (+ directory fsync), so a reader sees
//! either the old or the new record, never a torn one, also across a node crash.
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use sandbox_wire::wire::ProcessRecord;
use serde::{de::DeserializeOwned, Serialize};

/// Writes `value` as JSON to `path` atomically. `durable` adds the fsyncs; skip them only for
/// updates that a later durable write supersedes (e.g. output counters).
pub fn write_json<T: Serialize>(path: &Path, value: &T, durable: bool) -> io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::other("record path has no parent"))?;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("record");
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let body = serde_json::to_vec(value).map_err(io::Error::other)?;
    {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(&body)?;
        if durable {
            f.sync_all()?;
        }
    }
    fs::rename(&tmp, path)?;
    if durable {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Writes a file only its owner reads: everything under the state dir is (output, env, records,
/// and files that say nothing but would weaken the rule if they were the exception).
pub fn write_private(path: &Path, body: &[u8]) -> io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(body)
}

pub fn read_json<T: DeserializeOwned>(path: &Path) -> io::Result<T> {
    let body = fs::read(path)?;
    serde_json::from_slice(&body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

pub fn read_record(path: &Path) -> io::Result<ProcessRecord> {
    read_json(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_replace() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.json");
        write_json(&p, &vec![1, 2, 3], true).unwrap();
        write_json(&p, &vec![4], false).unwrap();
        let v: Vec<i32> = read_json(&p).unwrap();
        assert_eq!(v, vec![4]);
        let leftovers: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "temp files left behind");
    }
}
