//go:build tools

// Package crds is never compiled (see the build constraint). The blank imports name one
// small package of each CRD source module so that "go mod tidy" keeps the requirements
// in go.mod and their checksums in go.sum.
package crds

import (
	_ "github.com/aws/eks-anywhere/pkg/constants"
	_ "github.com/aws/etcdadm-bootstrap-provider/api/v1beta1"
	_ "github.com/aws/etcdadm-controller/api/v1beta1"
	// Its CRDs only for the components install test (its manifest stands in for cert-manager's
	// release manifest); the package is a doc comment and a constant.
	_ "github.com/cert-manager/cert-manager/pkg/apis/certmanager"
	// Not api/v1beta1: CAPX v1.3.2's API imports sigs.k8s.io/cluster-api/api/v1beta1, a path
	// Cluster API v1.14 no longer has. This package (build tag e2e, which tidy ignores) needs
	// only Ginkgo.
	_ "github.com/nutanix-cloud-native/cluster-api-provider-nutanix/test/e2e/log"
	// Not crd (it imports client-go and more): pkg/build imports the standard library only.
	_ "github.com/tinkerbell/tinkerbell/pkg/build"
	_ "sigs.k8s.io/cluster-api-addon-provider-helm/version"
	_ "sigs.k8s.io/cluster-api-provider-vsphere/pkg/version"
	_ "sigs.k8s.io/cluster-api/version"
	_ "sigs.k8s.io/cluster-api/test/framework/exec"
	_ "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
)
