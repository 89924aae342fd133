// Prints the kstatus result (sigs.k8s.io/cli-utils/pkg/kstatus/status.Compute) of each object file:
//   go run . ../resource_customizations/sandbox.dev/SandboxProcess/testdata/*.yaml
package main

import (
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"
)

func main() {
	for _, f := range os.Args[1:] {
		b, err := os.ReadFile(f)
		if err != nil {
			panic(err)
		}
		j, err := yaml.YAMLToJSON(b)
		if err != nil {
			panic(err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil {
			panic(err)
		}
		r, err := status.Compute(u)
		if err != nil {
			fmt.Printf("%s\tERROR %v\n", f, err)
			continue
		}
		fmt.Printf("%s\t%s\t%s\n", f, r.Status, r.Message)
	}
}
