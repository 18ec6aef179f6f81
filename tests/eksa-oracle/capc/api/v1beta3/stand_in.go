// Package v1beta3 is a stand-in written for capstan's EKS Anywhere oracle: the names EKS
// Anywhere's kubectl wrapper and client scheme refer to, and nothing else. It registers no
// kinds: the oracle never reads or writes a CloudStack object.
package v1beta3

import "k8s.io/apimachinery/pkg/runtime"

// CloudStackMachineTemplate is decoded from YAML by EKS Anywhere's kubectl wrapper, a code path
// the oracle never takes.
type CloudStackMachineTemplate struct {
	Spec map[string]interface{} `json:"spec,omitempty"`
}

// AddToScheme registers nothing.
func AddToScheme(*runtime.Scheme) error { return nil }
