// capstan's stand-in for sigs.k8s.io/cluster-api-provider-cloudstack: EKS Anywhere takes that
// module from a nested directory its module zip leaves out, and the oracle never renders a
// CloudStack cluster. Only what the EKS Anywhere packages the oracle builds reference is here.
module sigs.k8s.io/cluster-api-provider-cloudstack

go 1.24

require k8s.io/apimachinery v0.34.2
