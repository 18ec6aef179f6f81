// Module that pins the Go modules whose CRD YAMLs the capstan test harness installs.
// Nothing here is ever built: tools.go only exists so that "go mod tidy" keeps the
// requirements (and go.sum pins their hashes). The harness runs "go mod download -json"
// in this directory to find each module's directory in the Go module cache and reads
// the CRDs from there. The replace block pins each module to exactly the version named
// here, independent of what minimal version selection would pick from the other modules'
// requirements (CAPV v1.16 alone would otherwise raise cluster-api to v1.13). The
// require block below therefore shows what MVS would select (go mod tidy rewrites it);
// the replace block is what actually gets downloaded and read.
// Versions are also listed in ../versions.env; keep both in sync.
module capstan.invalid/control-plane/crds

go 1.26.0

require (
	github.com/aws/eks-anywhere v0.26.1
	github.com/aws/etcdadm-bootstrap-provider v1.0.20
	github.com/aws/etcdadm-controller v1.0.28
	github.com/cert-manager/cert-manager v1.21.2
	github.com/nutanix-cloud-native/cluster-api-provider-nutanix v1.3.2
	github.com/tinkerbell/tinkerbell v0.23.0
	sigs.k8s.io/cluster-api v1.13.2
	sigs.k8s.io/cluster-api-addon-provider-helm v0.6.4
	sigs.k8s.io/cluster-api-provider-vsphere v1.16.1
	sigs.k8s.io/cluster-api/test v1.13.0
	sigs.k8s.io/cluster-inventory-api v0.1.3
)

require (
	github.com/Masterminds/semver/v3 v3.4.0 // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/davecgh/go-spew v1.1.2-0.20180830191138-d8f796af33cc // indirect
	github.com/emicklei/go-restful/v3 v3.13.0 // indirect
	github.com/evanphx/json-patch/v5 v5.9.11 // indirect
	github.com/fsnotify/fsnotify v1.9.0 // indirect
	github.com/fxamacker/cbor/v2 v2.9.1 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-openapi/jsonpointer v0.23.1 // indirect
	github.com/go-openapi/jsonreference v0.21.5 // indirect
	github.com/go-openapi/swag v0.26.0 // indirect
	github.com/go-openapi/swag/cmdutils v0.26.0 // indirect
	github.com/go-openapi/swag/conv v0.26.0 // indirect
	github.com/go-openapi/swag/fileutils v0.26.0 // indirect
	github.com/go-openapi/swag/jsonname v0.26.0 // indirect
	github.com/go-openapi/swag/jsonutils v0.26.0 // indirect
	github.com/go-openapi/swag/loading v0.26.0 // indirect
	github.com/go-openapi/swag/mangling v0.26.0 // indirect
	github.com/go-openapi/swag/netutils v0.26.0 // indirect
	github.com/go-openapi/swag/stringutils v0.26.0 // indirect
	github.com/go-openapi/swag/typeutils v0.26.0 // indirect
	github.com/go-openapi/swag/yamlutils v0.26.0 // indirect
	github.com/go-task/slim-sprig/v3 v3.0.0 // indirect
	github.com/google/gnostic-models v0.7.1 // indirect
	github.com/google/pprof v0.0.0-20260402051712-545e8a4df936 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.3-0.20250322232337-35a7c28c31ee // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/onsi/ginkgo/v2 v2.32.0 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/pmezard/go-difflib v1.0.1-0.20181226105442-5d4384ee4fb2 // indirect
	github.com/prometheus/client_golang v1.23.2 // indirect
	github.com/prometheus/client_model v0.6.2 // indirect
	github.com/prometheus/common v0.67.5 // indirect
	github.com/prometheus/procfs v0.19.2 // indirect
	github.com/spf13/pflag v1.0.10 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	go.yaml.in/yaml/v2 v2.4.4 // indirect
	go.yaml.in/yaml/v3 v3.0.4 // indirect
	golang.org/x/mod v0.40.0 // indirect
	golang.org/x/net v0.58.0 // indirect
	golang.org/x/oauth2 v0.36.0 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/term v0.45.0 // indirect
	golang.org/x/text v0.41.0 // indirect
	golang.org/x/time v0.15.0 // indirect
	golang.org/x/tools v0.49.0 // indirect
	gomodules.xyz/jsonpatch/v2 v2.5.0 // indirect
	google.golang.org/protobuf v1.36.12-0.20260120151049-f2248ac996af // indirect
	gopkg.in/evanphx/json-patch.v4 v4.13.0 // indirect
	gopkg.in/inf.v0 v0.9.1 // indirect
	k8s.io/api v0.36.3 // indirect
	k8s.io/apiextensions-apiserver v0.36.3 // indirect
	k8s.io/apimachinery v0.36.3 // indirect
	k8s.io/client-go v0.36.3 // indirect
	k8s.io/cluster-bootstrap v0.36.3 // indirect
	k8s.io/klog/v2 v2.140.0 // indirect
	k8s.io/kube-openapi v0.0.0-20260501160325-927ab1f70cd6 // indirect
	k8s.io/utils v0.0.0-20260626114624-be93311217bd // indirect
	sigs.k8s.io/cluster-api/api v0.0.0-00010101000000-000000000000 // indirect
	sigs.k8s.io/controller-runtime v0.24.1 // indirect
	sigs.k8s.io/json v0.0.0-20250730193827-2d320260d730 // indirect
	sigs.k8s.io/randfill v1.0.0 // indirect
	sigs.k8s.io/structured-merge-diff/v6 v6.4.2 // indirect
	sigs.k8s.io/yaml v1.6.0 // indirect
)

replace (
	github.com/aws/eks-anywhere => github.com/aws/eks-anywhere v0.26.1
	github.com/aws/etcdadm-bootstrap-provider => github.com/aws/etcdadm-bootstrap-provider v1.0.19
	github.com/aws/etcdadm-controller => github.com/aws/etcdadm-controller v1.0.28
	github.com/cert-manager/cert-manager => github.com/cert-manager/cert-manager v1.21.2
	github.com/nutanix-cloud-native/cluster-api-provider-nutanix => github.com/nutanix-cloud-native/cluster-api-provider-nutanix v1.3.2
	github.com/tinkerbell/tinkerbell => github.com/tinkerbell/tinkerbell v0.23.0
	sigs.k8s.io/cluster-api => sigs.k8s.io/cluster-api v1.14.2
	sigs.k8s.io/cluster-api-addon-provider-helm => sigs.k8s.io/cluster-api-addon-provider-helm v0.6.4
	sigs.k8s.io/cluster-api-provider-vsphere => sigs.k8s.io/cluster-api-provider-vsphere v1.16.1
	sigs.k8s.io/cluster-api/api => sigs.k8s.io/cluster-api/api v1.14.2
	sigs.k8s.io/cluster-api/test => sigs.k8s.io/cluster-api/test v1.14.2
	sigs.k8s.io/cluster-inventory-api => sigs.k8s.io/cluster-inventory-api v0.1.3
)
