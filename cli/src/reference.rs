//! docs/reference/plugin.md: every command and flag of `kubectl sandbox`, walked from the clap
//! definition. The test fails when the committed page differs, naming the command that rewrites
//! it (the same test with SPO_BLESS=1).
use clap::builder::PossibleValue;
use clap::{Arg, ArgAction, Command, CommandFactory};

// The page helpers are the operator's reference tests', shared by path: no crate dependency.
#[path = "../../operator/tests/reference/markdown.rs"]
mod markdown;

use markdown::{cell, code, head, prose, row};

const PAGE: &str = "docs/reference/plugin.md";
const COMMAND: &str = "cargo test -p kubectl-sandbox --bin kubectl-sandbox reference::";

#[test]
fn plugin_page() {
    let root = markdown::root(env!("CARGO_MANIFEST_DIR"));
    markdown::check_or_bless(&root, PAGE, &page(), COMMAND);
}

fn page() -> String {
    let mut cli = crate::Cli::command();
    // Built: bin names, usages, the help subcommand and global flags in place, as users meet them.
    cli.build();
    let mut out = markdown::generated_by(COMMAND);
    out += &format!("# {}\n\n", bin_name(&cli));
    out += &describe(&mut cli, true);
    subcommands(&mut cli, &mut out);
    format!("{}\n", out.trim_end())
}

/// Each subcommand's section, depth first in clap's order; not those of clap's `help`, which
/// only name the others again.
fn subcommands(cmd: &mut Command, out: &mut String) {
    for sub in cmd.get_subcommands_mut().filter(|s| !s.is_hide_set()) {
        out.truncate(out.trim_end().len());
        *out += &format!("\n\n## {}\n\n", bin_name(sub));
        *out += &describe(sub, false);
        if sub.get_name() != "help" {
            subcommands(sub, out);
        }
    }
}

fn bin_name(cmd: &Command) -> String {
    cmd.get_bin_name().unwrap_or(cmd.get_name()).to_string()
}

/// A command's text, aliases, usage and arguments; at the root, its flags that every command
/// takes (`global`), which the others leave out.
fn describe(cmd: &mut Command, root: bool) -> String {
    let mut out = String::new();
    let aliases: Vec<String> = cmd.get_all_aliases().map(code).collect();
    if !aliases.is_empty() {
        out += &format!("Aliases: {}.\n\n", aliases.join(", "));
    }
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        out += &format!("{}\n\n", prose(&about.to_string()));
    }
    let usage = cmd.render_usage().to_string();
    let usage = usage.strip_prefix("Usage: ").unwrap_or(&usage);
    out += &format!("```text\n{usage}\n```\n\n");
    if let Some(after) = cmd.get_after_long_help().or(cmd.get_after_help()) {
        out += &format!("{}\n\n", prose(&after.to_string()));
    }
    let args: Vec<&Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter(|a| root || !(a.is_global_set() || is_help(a)))
        .collect();
    if args.is_empty() {
        return out;
    }
    out += &head(&[
        "Argument",
        "Value",
        "Default",
        "Values",
        "Notes",
        "Description",
    ]);
    for arg in args {
        out += &arg_row(cmd, arg);
    }
    out
}

/// `-h`/`--help`, which clap gives every command.
fn is_help(arg: &Arg) -> bool {
    matches!(
        arg.get_action(),
        ArgAction::Help | ArgAction::HelpShort | ArgAction::HelpLong
    )
}

fn arg_row(cmd: &Command, arg: &Arg) -> String {
    let takes_values = arg.get_action().takes_values();
    let mut names: Vec<String> = vec![];
    names.extend(arg.get_short().map(|s| code(&format!("-{s}"))));
    names.extend(arg.get_long().map(|l| code(&format!("--{l}"))));
    if arg.is_positional() {
        names.push(code(&value_names(arg).join(" ")));
    }
    let value = if takes_values && !arg.is_positional() {
        code(&value_text(arg))
    } else {
        String::new()
    };
    let defaults: Vec<String> = match takes_values {
        true => arg
            .get_default_values()
            .iter()
            .map(|d| code(&d.to_string_lossy()))
            .collect(),
        false => vec![],
    };
    let possible: Vec<String> = match takes_values {
        true => arg
            .get_possible_values()
            .iter()
            .filter(|p| !p.is_hide_set())
            .map(possible_value)
            .collect(),
        false => vec![],
    };
    let help = arg.get_long_help().or(arg.get_help());
    row(&[
        cell(&names.join(", ")),
        cell(&value),
        cell(&defaults.join(", ")),
        cell(&possible.join(", ")),
        cell(&notes(cmd, arg).join("; ")),
        cell(&help.map(ToString::to_string).unwrap_or_default()),
    ])
}

fn value_names(arg: &Arg) -> Vec<String> {
    match arg.get_value_names() {
        Some(names) => names.iter().map(ToString::to_string).collect(),
        None => vec![arg.get_id().to_string().to_uppercase()],
    }
}

/// The value as typed after the flag: `NAME=VALUE`, `[=client|none]` when optional, `…` after
/// one taken more than once.
fn value_text(arg: &Arg) -> String {
    let mut text = value_names(arg).join(" ");
    let range = arg.get_num_args().unwrap_or_default();
    if range.max_values() > 1 {
        text += "...";
    }
    if arg.is_require_equals_set() {
        text = format!("={text}");
    }
    if range.min_values() == 0 {
        text = format!("[{text}]");
    }
    text
}

fn possible_value(p: &PossibleValue) -> String {
    match p.get_help() {
        Some(help) => format!("{} ({help})", code(p.get_name())),
        None => code(p.get_name()),
    }
}

/// Required, repeatable, global, after `--`, its environment variable, what it conflicts with.
fn notes(cmd: &Command, arg: &Arg) -> Vec<String> {
    let mut out = vec![];
    if arg.is_required_set() {
        out.push("required".to_string());
    }
    if matches!(arg.get_action(), ArgAction::Append | ArgAction::Count) {
        out.push("repeatable".into());
    }
    if arg.is_global_set() {
        out.push("global".into());
    }
    if arg.is_last_set() {
        out.push(format!("after {}", code("--")));
    }
    if let Some(env) = arg.get_env() {
        out.push(format!("env {}", code(&env.to_string_lossy())));
    }
    let conflicts: Vec<String> = cmd
        .get_arg_conflicts_with(arg)
        .iter()
        .map(|a| match a.get_long() {
            Some(long) => code(&format!("--{long}")),
            None => code(a.get_id().as_str()),
        })
        .collect();
    if !conflicts.is_empty() {
        out.push(format!("conflicts with {}", conflicts.join(", ")));
    }
    out
}
