//! `-o jsonpath=TEMPLATE` as kubectl takes it: text with `{.field.path}` expressions (JSONPath
//! relative to the object, `[*]`, `[0]`, filters), `{range EXPR}...{end}` over each result, and
//! string literals such as `{"\n"}`. Several results of one expression print space-separated.
use jsonpath_rust::JsonPath;
use serde_json::Value;

use crate::error::CliError;

#[derive(Debug, PartialEq)]
enum Node {
    Text(String),
    Expr(String),
    Range(String, Vec<Node>),
}

fn bad(template: &str, why: &str) -> CliError {
    CliError::Usage(format!("-o jsonpath={template}: {why}"))
}

/// Open `{range}` blocks, innermost last, each with the nodes read into it so far; the first
/// is the template itself.
struct Blocks(Vec<(Option<String>, Vec<Node>)>);

impl Blocks {
    fn push(&mut self, n: Node) {
        self.0.last_mut().expect("root").1.push(n);
    }

    /// One `{...}`: a range opened or closed, a string literal, or an expression.
    fn directive(&mut self, template: &str, inner: &str) -> Result<(), CliError> {
        if let Some(expr) = inner.strip_prefix("range ") {
            self.0.push((Some(expr.trim().into()), Vec::new()));
        } else if inner == "end" {
            let unopened = || bad(template, "{end} without {range}");
            let (expr, body) = self.0.pop().expect("root");
            let expr = expr.ok_or_else(unopened)?;
            self.0
                .last_mut()
                .ok_or_else(unopened)?
                .1
                .push(Node::Range(expr, body));
        } else if inner.starts_with('"') {
            let s: String = serde_json::from_str(inner)
                .map_err(|e| bad(template, &format!("string literal {inner}: {e}")))?;
            self.push(Node::Text(s));
        } else {
            self.push(Node::Expr(inner.into()));
        }
        Ok(())
    }
}

/// The delimiters of a directive (named: a brace in a literal would confuse brace-counting
/// readers of this file).
const OPEN: char = '{';
const CLOSE: char = '}';

fn parse(template: &str) -> Result<Vec<Node>, CliError> {
    let mut blocks = Blocks(vec![(None, Vec::new())]);
    let mut rest = template;
    while !rest.is_empty() {
        let Some(open) = rest.find(OPEN) else {
            blocks.push(Node::Text(rest.into()));
            break;
        };
        if open > 0 {
            blocks.push(Node::Text(rest[..open].into()));
        }
        let close = rest[open..]
            .find(CLOSE)
            .ok_or_else(|| bad(template, &format!("unclosed {OPEN}")))?
            + open;
        blocks.directive(template, rest[open + 1..close].trim())?;
        rest = &rest[close + 1..];
    }
    if blocks.0.len() != 1 {
        return Err(bad(template, "{range} without {end}"));
    }
    Ok(blocks.0.pop().expect("root").1)
}

fn query<'a>(template: &str, v: &'a Value, expr: &str) -> Result<Vec<&'a Value>, CliError> {
    let path = match expr {
        "@" | "." => "$".to_string(),
        e if e.starts_with('$') => e.to_string(),
        e if e.starts_with('.') || e.starts_with('[') => format!("${e}"),
        e => format!("$.{e}"),
    };
    v.query(&path)
        .map_err(|e| bad(template, &format!("{expr}: {e}")))
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn eval(template: &str, nodes: &[Node], v: &Value, out: &mut String) -> Result<(), CliError> {
    for n in nodes {
        match n {
            Node::Text(t) => out.push_str(t),
            Node::Expr(e) => {
                let found = query(template, v, e)?;
                let parts: Vec<String> = found.into_iter().map(text).collect();
                out.push_str(&parts.join(" "));
            }
            Node::Range(e, body) => {
                for item in query(template, v, e)? {
                    eval(template, body, item, out)?;
                }
            }
        }
    }
    Ok(())
}

/// The template applied to `v`.
pub fn render(template: &str, v: &Value) -> Result<String, CliError> {
    let nodes = parse(template)?;
    let mut out = String::new();
    eval(template, &nodes, v, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_templates() {
        let v = serde_json::json!({"items": [
            {"metadata": {"name": "a"}, "status": {"exit": {"code": 0}}},
            {"metadata": {"name": "b"}, "status": {"exit": {"code": 3}}}]});
        assert_eq!(render("{.items[*].metadata.name}", &v).unwrap(), "a b");
        assert_eq!(render("{.items[1].status.exit.code}", &v).unwrap(), "3");
        assert_eq!(
            render(
                r#"{range .items[*]}{.metadata.name}={.status.exit.code}{"\n"}{end}"#,
                &v
            )
            .unwrap(),
            "a=0\nb=3\n"
        );
        assert_eq!(
            render("n: {.items[0].metadata.name}!", &v).unwrap(),
            "n: a!"
        );
        assert_eq!(
            render(r#"{.items[?(@.metadata.name=="b")].status.exit.code}"#, &v).unwrap(),
            "3"
        );
        for broken in ["{.items", "{range .items[*]}x", "x{end}"] {
            let e = render(broken, &v).unwrap_err().to_string();
            assert!(e.starts_with("-o jsonpath="), "{e}");
        }
    }
}
