// gitopscheck judges SandboxProcess objects the way GitOps tools do, with their own libraries:
// kstatus (sigs.k8s.io/cli-utils: Flux's `wait`/`healthChecks`, and other kstatus readers) and
// Flux's `healthCheckExprs` (CEL through cel-go, each expression given the object's top-level
// fields, optional types on, evaluated failed → current → inProgress as kustomize-controller does).
//
//	gitopscheck KUSTOMIZATION.yaml < LIST.json
//
// KUSTOMIZATION.yaml is a Flux Kustomization whose spec.healthCheckExprs has an entry for
// kind SandboxProcess; LIST.json is `kubectl get sbp -o json`. Prints one line per object:
// NAME KSTATUS FLUX-CEL (Current, InProgress, Failed).
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/google/cel-go/cel"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"
)

type exprs struct {
	Kind       string `json:"kind"`
	Current    string `json:"current"`
	InProgress string `json:"inProgress"`
	Failed     string `json:"failed"`
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gitopscheck KUSTOMIZATION.yaml < LIST.json")
		os.Exit(2)
	}
	raw, err := os.ReadFile(os.Args[1])
	check(err)
	var k struct {
		Spec struct {
			HealthCheckExprs []exprs `json:"healthCheckExprs"`
		} `json:"spec"`
	}
	check(yaml.Unmarshal(raw, &k))
	var e *exprs
	for i := range k.Spec.HealthCheckExprs {
		if k.Spec.HealthCheckExprs[i].Kind == "SandboxProcess" {
			e = &k.Spec.HealthCheckExprs[i]
		}
	}
	if e == nil || e.Current == "" {
		check(fmt.Errorf("%s: no healthCheckExprs entry with a current expression for kind SandboxProcess", os.Args[1]))
	}
	var list struct {
		Items []map[string]any `json:"items"`
	}
	in, err := io.ReadAll(os.Stdin)
	check(err)
	// Integers as int64, as the API machinery expects them.
	check(json.Unmarshal(in, &list))
	env, err := cel.NewEnv(
		cel.OptionalTypes(),
		cel.Variable("apiVersion", cel.DynType), cel.Variable("kind", cel.DynType),
		cel.Variable("metadata", cel.DynType), cel.Variable("spec", cel.DynType),
		cel.Variable("status", cel.DynType),
	)
	check(err)
	compile := func(src string) cel.Program {
		if src == "" {
			return nil
		}
		ast, iss := env.Compile(src)
		if iss.Err() != nil {
			check(fmt.Errorf("compiling %q: %w", src, iss.Err()))
		}
		p, err := env.Program(ast)
		check(err)
		return p
	}
	failed, current, inProgress := compile(e.Failed), compile(e.Current), compile(e.InProgress)
	for _, obj := range list.Items {
		u := &unstructured.Unstructured{Object: obj}
		res, err := status.Compute(u)
		check(err)
		vars := map[string]any{"apiVersion": obj["apiVersion"], "kind": obj["kind"],
			"metadata": obj["metadata"], "spec": obj["spec"], "status": obj["status"]}
		if vars["status"] == nil {
			vars["status"] = map[string]any{}
		}
		verdict := "InProgress"
		for _, c := range []struct {
			p    cel.Program
			name string
		}{{failed, "Failed"}, {current, "Current"}, {inProgress, "InProgress"}} {
			if c.p == nil {
				continue
			}
			out, _, err := c.p.Eval(vars)
			if err != nil {
				// Flux waits on an expression that cannot be evaluated yet.
				continue
			}
			if b, ok := out.Value().(bool); ok && b {
				verdict = c.name
				break
			}
		}
		fmt.Printf("%s %s %s\n", u.GetName(), res.Status, verdict)
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "gitopscheck:", err)
		os.Exit(1)
	}
}
