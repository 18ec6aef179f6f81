// capstan's stand-in for the package sigs.k8s.io/cluster-api/api/v1beta1, which upstream CAPX
// (github.com/nutanix-cloud-native/cluster-api-provider-nutanix v1.3.2, the version EKS Anywhere
// requires) imports. EKS Anywhere builds against its Cluster API fork, which has that package at
// api/core/v1beta1 (Cluster API v1.11's layout), and against its own copy of CAPX v1.3.2
// (internal/thirdparty/capx, left out of its module zip) whose only change is that import path.
// This module makes the old path name the fork's types, which gives the same program.
module sigs.k8s.io/cluster-api/api/v1beta1

go 1.24

require sigs.k8s.io/cluster-api v1.6.2
