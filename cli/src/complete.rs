//! `kubectl sandbox <TAB>`: kubectl (1.26+) completes a plugin's words by running
//! `kubectl_complete-sandbox WORDS... CURRENT` from PATH (we ship it: a script that runs
//! `kubectl-sandbox __complete ...`) and reads cobra's protocol back: one candidate a line
//! (`value<TAB>description`), then `:DIRECTIVE`. The words are walked over the clap definition,
//! so every subcommand and flag completes as it is defined; object and pod names come from the
//! cluster (best effort, a few seconds at most).
use std::time::Duration;

use clap::Command;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::Api;
use sandbox_client::Object;

use crate::connect::KubeFlags;

/// cobra's `ShellCompDirectiveNoFileComp`: no file names either when nothing matches.
const NO_FILES: u8 = 4;
/// cobra's `ShellCompDirectiveDefault`: the shell's own completion (file names), e.g. in argv.
const DEFAULT: u8 = 0;

/// What the words ask to complete.
#[derive(Debug, PartialEq, Eq)]
pub enum Want {
    /// These candidates (value, description).
    Words(Vec<(String, String)>),
    /// Names of SandboxProcesses (`logs`, `kill`, `wait`, `attach`) or pods (`run`).
    Objects { pods: bool, prefix: String },
    /// Whatever the shell completes (argv after `--`, a flag's free value).
    Default,
}

/// Walks `words` (the last one is being completed) over `cmd`; also the connection flags seen.
pub fn want(cmd: &Command, words: &[String]) -> (Want, KubeFlags) {
    let (done, cur) = match words.split_last() {
        Some((cur, done)) => (done, cur.as_str()),
        None => (&[][..], ""),
    };
    let mut kube = KubeFlags::default();
    let mut at = cmd;
    let mut positionals = 0usize;
    let mut i = 0;
    while i < done.len() {
        let w = done[i].as_str();
        i += 1;
        if w == "--" {
            return (Want::Default, kube);
        }
        if let Some(flag) = w.strip_prefix('-').filter(|f| !f.is_empty()) {
            let (name, inline) = match flag.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (flag, None),
            };
            let arg = find_flag(at, name);
            if arg.is_some_and(|a| a.get_action().takes_values()) && inline.is_none() {
                // The value is the next word, or the word being completed.
                let Some(v) = done.get(i) else {
                    return (values(arg.expect("checked"), cur), kube);
                };
                i += 1;
                note(&mut kube, name, v);
            } else if let Some(v) = inline {
                note(&mut kube, name, &v);
            }
            continue;
        }
        match at.find_subcommand(w) {
            Some(sub) if positionals == 0 => at = sub,
            _ => positionals += 1,
        }
    }
    if cur.starts_with('-') {
        return (Want::Words(flags(at, cur)), kube);
    }
    if at.has_subcommands() && positionals == 0 {
        let subs = at
            .get_subcommands()
            .filter(|s| !s.is_hide_set() && s.get_name().starts_with(cur))
            .map(|s| (s.get_name().to_string(), about(s.get_about())))
            .collect();
        return (Want::Words(subs), kube);
    }
    let name = at.get_name();
    let want = match (name, positionals) {
        ("run" | "exec", 0) => Want::Objects {
            pods: true,
            prefix: cur.into(),
        },
        ("logs" | "kill" | "wait" | "attach", 0) => Want::Objects {
            pods: false,
            prefix: cur.into(),
        },
        ("completion", 0) => Want::Words(
            ["bash", "zsh", "fish", "elvish", "powershell"]
                .iter()
                .filter(|s| s.starts_with(cur))
                .map(|s| (s.to_string(), String::new()))
                .collect(),
        ),
        ("run" | "exec", _) => Want::Default,
        _ => Want::Words(Vec::new()),
    };
    (want, kube)
}

/// The help's first clause: a candidate's description is one short line.
fn about(s: Option<&clap::builder::StyledStr>) -> String {
    let text = s.map(|s| s.to_string()).unwrap_or_default();
    let line = text.lines().next().unwrap_or("");
    let end = [";", ". ", ": "]
        .iter()
        .filter_map(|sep| line.find(sep))
        .min()
        .unwrap_or(line.len());
    line[..end].trim_end_matches('.').to_string()
}

/// `name` is `x` for `-x` and `-long` for `--long`.
fn find_flag<'a>(cmd: &'a Command, name: &str) -> Option<&'a clap::Arg> {
    cmd.get_arguments().find(|a| match name.strip_prefix('-') {
        Some(long) => a.get_long() == Some(long),
        None => name.chars().count() == 1 && a.get_short() == name.chars().next(),
    })
}

fn flags(cmd: &Command, cur: &str) -> Vec<(String, String)> {
    cmd.get_arguments()
        .filter(|a| !a.is_positional() && !a.is_hide_set())
        .filter_map(|a| {
            a.get_long()
                .map(|l| (format!("--{l}"), about(a.get_help())))
        })
        .filter(|(l, _)| l.starts_with(cur))
        .collect()
}

fn values(arg: &clap::Arg, cur: &str) -> Want {
    let vals: Vec<_> = arg
        .get_possible_values()
        .into_iter()
        .filter(|v| !v.is_hide_set() && v.get_name().starts_with(cur))
        .map(|v| (v.get_name().to_string(), String::new()))
        .collect();
    if vals.is_empty() {
        Want::Default
    } else {
        Want::Words(vals)
    }
}

fn note(kube: &mut KubeFlags, name: &str, v: &str) {
    let v = Some(v.to_string());
    match name {
        "n" | "-namespace" => kube.namespace = v,
        "-context" => kube.context = v,
        "-cluster" => kube.cluster = v,
        "-user" => kube.user = v,
        "-kubeconfig" => kube.kubeconfig = v.map(Into::into),
        _ => {}
    }
}

/// Prints the completion of `words` in cobra's protocol.
pub async fn run(cmd: &Command, words: &[String]) {
    let (want, kube) = want(cmd, words);
    let (found, directive) = match want {
        Want::Words(w) => (w, NO_FILES),
        Want::Default => (Vec::new(), DEFAULT),
        Want::Objects { pods, prefix } => {
            let names = tokio::time::timeout(Duration::from_secs(5), names(&kube, pods))
                .await
                .unwrap_or_default();
            let found = names
                .into_iter()
                .filter(|n| n.starts_with(&prefix))
                .map(|n| (n, String::new()))
                .collect();
            (found, NO_FILES)
        }
    };
    let mut out = String::new();
    for (value, help) in found {
        out += &value;
        if !help.is_empty() {
            out += "\t";
            out += &help;
        }
        out += "\n";
    }
    out += &format!(":{directive}\n");
    print!("{out}");
}

/// Object or pod names in the namespace the flags name; none on any error.
async fn names(kube: &KubeFlags, pods: bool) -> Vec<String> {
    let Ok((client, ns)) = kube.connect().await else {
        return Vec::new();
    };
    let lp = ListParams::default();
    let got = if pods {
        Api::<Pod>::namespaced(client, &ns)
            .list_metadata(&lp)
            .await
            .map(names_of)
    } else {
        Api::<Object>::namespaced(client, &ns)
            .list_metadata(&lp)
            .await
            .map(names_of)
    };
    got.unwrap_or_default()
}

fn names_of<K: Clone>(l: kube::core::ObjectList<kube::core::PartialObjectMeta<K>>) -> Vec<String> {
    l.items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn words(s: &[&str]) -> Want {
        let mut cmd = crate::Cli::command();
        cmd.build();
        let w: Vec<String> = s.iter().map(|s| s.to_string()).collect();
        want(&cmd, &w).0
    }

    fn names(w: Want) -> Vec<String> {
        match w {
            Want::Words(w) => w.into_iter().map(|(v, _)| v).collect(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn subcommands_flags_values_and_names() {
        let all = names(words(&[""]));
        for sub in [
            "run",
            "exec",
            "logs",
            "kill",
            "ls",
            "wait",
            "attach",
            "completion",
        ] {
            assert!(all.contains(&sub.to_string()), "{sub} in {all:?}");
        }
        assert!(!all.iter().any(|s| s.starts_with("__")), "hidden: {all:?}");
        assert_eq!(names(words(&["lo"])), vec!["logs"]);
        assert_eq!(names(words(&["-n", "ns", "k"])), vec!["kill"]);
        let f = names(words(&["logs", "--fo"]));
        assert_eq!(f, vec!["--follow"]);
        assert!(names(words(&["logs", "x", "--"])).contains(&"--namespace".to_string()));
        assert_eq!(
            names(words(&["logs", "--stream", "std"])),
            vec!["stdout", "stderr"]
        );
        assert_eq!(
            names(words(&["run", "--restart", ""])),
            vec!["Never", "OnFailure", "Always"]
        );
        assert_eq!(names(words(&["run", "--restart", "O"])), vec!["OnFailure"]);
        assert_eq!(names(words(&["wait", "--for="])), Vec::<String>::new());
        assert_eq!(
            words(&["-n", "team", "logs", "ab"]),
            Want::Objects {
                pods: false,
                prefix: "ab".into()
            }
        );
        assert_eq!(
            words(&["run", "--name", "x", "w"]),
            Want::Objects {
                pods: true,
                prefix: "w".into()
            }
        );
        assert_eq!(words(&["run", "web", "--", "l"]), Want::Default);
        assert_eq!(words(&["logs", "--after", ""]), Want::Default);
        assert_eq!(names(words(&["logs", "x", ""])), Vec::<String>::new());
        assert_eq!(names(words(&["completion", "b"])), vec!["bash"]);
        let (_, kube) = want(&crate::Cli::command(), &["--namespace=t".into(), "".into()]);
        assert_eq!(kube.namespace.as_deref(), Some("t"));
    }
}
