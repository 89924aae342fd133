//! Prints the CustomResourceDefinitions of this project as YAML (`crds/sandboxprocess.yaml`).
fn main() {
    print!("{}", sandbox_operator::crdgen::yaml());
}
