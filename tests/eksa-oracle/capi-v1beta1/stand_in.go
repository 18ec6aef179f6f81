// Package v1beta1 is a stand-in written for capstan's EKS Anywhere oracle: aliases of the Cluster
// API fork's api/core/v1beta1 types, exactly the names CAPX v1.3.2's api/v1beta1 refers to. With
// aliases (not copies) CAPX's types embed the very types EKS Anywhere's fork of CAPX embeds.
package v1beta1

import core "sigs.k8s.io/cluster-api/api/core/v1beta1"

// Each name is the fork's type itself, so deep copies, JSON tags and methods are the fork's.
type (
	APIEndpoint    = core.APIEndpoint
	ConditionType  = core.ConditionType
	Conditions     = core.Conditions
	FailureDomains = core.FailureDomains
	MachineAddress = core.MachineAddress
	ObjectMeta     = core.ObjectMeta
)
