// eksa-oracle prints the Cluster API objects EKS Anywhere's own code generates for cluster specs.
//
// It is the oracle of capstan's differential render test (tests/e2e/tests/eksa_oracle.rs): the
// same spec and the same release data (a Bundles manifest and EKS-D Release manifests) go to
// capstan and to this program, and the two outputs are compared object by object.
//
// It follows the path EKS Anywhere's CLI and controller take for a new cluster: parse the
// config, apply the config manager's defaults and validations, build a cluster.Spec from the
// bundles and EKS-D releases, then ask the provider for its control plane and workers specs
// (with a Kubernetes client that finds nothing, so immutable templates keep their initial
// names) and the machine health checks. It knows the Docker, vSphere, Nutanix and Tinkerbell (bare metal) providers.
// Provider defaulting and validation that talk to vCenter or Prism Central never run: corpus
// specs are written fully specified.
//
// Cilium is not a Cluster API object in EKS Anywhere: its controller renders the Cilium Helm
// chart into the workload cluster. The oracle captures what it would hand to Helm (chart, version
// and values) through a Helm client that only records, and prints it as one more object of kind
// CiliumHelmChart. For an AWSIamConfig, the objects its controller applies inside the cluster
// (the authenticator's manifest, with the case's cluster ID) are printed as they are. A
// management cluster's curated packages controller is what the CLI hands to Helm for it, printed
// as an object of kind PackagesHelmChart (packages.go).
//
// Input (stdin, JSON): {"cases": [{"name": "...", "spec": "<path>", "bundles": "<path>",
// "eksd": ["<path>", ...], "eksaVersion": "v0.26.1"}]}. Output (stdout, JSON): {"<name>":
// {"objects": [...]} or {"error": "..."}}.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	eksdv1alpha1 "github.com/aws/eks-distro-build-tooling/release/api/v1alpha1"
	"github.com/go-logr/logr"
	"github.com/google/uuid"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	anywherev1 "github.com/aws/eks-anywhere/pkg/api/v1alpha1"
	"github.com/aws/eks-anywhere/pkg/awsiamauth"
	"github.com/aws/eks-anywhere/pkg/clients/kubernetes"
	"github.com/aws/eks-anywhere/pkg/cluster"
	"github.com/aws/eks-anywhere/pkg/clusterapi"
	"github.com/aws/eks-anywhere/pkg/constants"
	"github.com/aws/eks-anywhere/pkg/features"
	"github.com/aws/eks-anywhere/pkg/helm"
	"github.com/aws/eks-anywhere/pkg/networking/cilium"
	"github.com/aws/eks-anywhere/pkg/providers/docker"
	"github.com/aws/eks-anywhere/pkg/providers/nutanix"
	"github.com/aws/eks-anywhere/pkg/providers/tinkerbell"
	"github.com/aws/eks-anywhere/pkg/providers/vsphere"
	releasev1 "github.com/aws/eks-anywhere/release/api/v1alpha1"
)

type input struct {
	Cases []struct {
		Name        string   `json:"name"`
		Spec        string   `json:"spec"`
		Bundles     string   `json:"bundles"`
		EksD        []string `json:"eksd"`
		EksaVersion string   `json:"eksaVersion"`
		// SkipValidation renders a spec EKS Anywhere's config validation refuses but its templates
		// handle (control-plane-only clusters outside bare metal); the corpus says which and why.
		SkipValidation bool `json:"skipValidation"`
		// IamClusterID is the cluster ID the AWS IAM authenticator's manifest gets (EKS
		// Anywhere draws a random one; capstan derives it from the cluster's names).
		IamClusterID string `json:"iamClusterID"`
	} `json:"cases"`
}

// recordingHelm is a Helm client that records what it is asked to template and renders nothing.
// Every other method is left to the embedded nil interface: EKS Anywhere's Cilium templater calls
// only Template.
type recordingHelm struct {
	helm.Client
	chart, version, namespace string
	values                    interface{}
}

func (h *recordingHelm) Template(_ context.Context, uri, version, namespace string, values interface{}, _ string) ([]byte, error) {
	h.chart, h.version, h.namespace, h.values = uri, version, namespace, values
	return []byte{}, nil
}

type helmFactory struct{ h *recordingHelm }

func (f helmFactory) Get(context.Context, *anywherev1.Cluster) (helm.Client, error) { return f.h, nil }

type result struct {
	Objects []json.RawMessage `json:"objects,omitempty"`
	Error   string            `json:"error,omitempty"`
}

// emptyCluster is a Kubernetes client of a management cluster that has nothing yet: every Get is
// NotFound, so EKS Anywhere names immutable templates as for a new cluster.
type emptyCluster struct{}

func (emptyCluster) Get(_ context.Context, name, _ string, _ kubernetes.Object) error {
	return apierrors.NewNotFound(schema.GroupResource{}, name)
}
func (emptyCluster) List(context.Context, kubernetes.ObjectList, ...kubernetes.ListOption) error {
	return nil
}
func (emptyCluster) Create(context.Context, kubernetes.Object) error { return errReadOnly }
func (emptyCluster) Update(context.Context, kubernetes.Object) error { return errReadOnly }
func (emptyCluster) ApplyServerSide(context.Context, string, kubernetes.Object, ...kubernetes.ApplyServerSideOption) error {
	return errReadOnly
}
func (emptyCluster) Delete(context.Context, kubernetes.Object) error { return errReadOnly }
func (emptyCluster) DeleteAllOf(context.Context, kubernetes.Object, ...kubernetes.DeleteAllOfOption) error {
	return errReadOnly
}
func (emptyCluster) Patch(context.Context, kubernetes.Object, kubernetes.Patch, ...kubernetes.PatchOption) error {
	return errReadOnly
}

var errReadOnly = fmt.Errorf("eksa-oracle: the management cluster stand-in is read-only")

func main() {
	// apiServerExtraArgs is behind a feature flag in EKS Anywhere; capstan accepts it (and says
	// so in its README), so the oracle renders it too.
	os.Setenv(features.APIServerExtraArgsEnabledEnvVar, "true")
	// Nutanix's control plane spec reads the Prism Central credentials from the environment
	// (nutanix.GetCredsFromEnv) and writes them into the cloud controller manager's Secret
	// (<cluster>-nutanix-ccm-secret). capstan never renders credentials (the datacenter's
	// credentialRef names a Secret the user provides), so fixed dummies do: they keep the output
	// independent of the environment and keep real credentials that may be set there out of it.
	os.Setenv(constants.EksaNutanixUsernameKey, "eksa-oracle")
	os.Setenv(constants.EksaNutanixPasswordKey, "eksa-oracle")
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fail("reading input: %v", err)
	}
	out := map[string]result{}
	for _, c := range in.Cases {
		bundles := &releasev1.Bundles{}
		readYAML(c.Bundles, bundles)
		var eksd []eksdv1alpha1.Release
		for _, p := range c.EksD {
			r := eksdv1alpha1.Release{}
			readYAML(p, &r)
			eksd = append(eksd, r)
		}
		eksaRelease := &releasev1.EKSARelease{}
		eksaRelease.Spec.Version = c.EksaVersion
		eksaRelease.Spec.BundlesRef = releasev1.BundlesRef{Name: bundles.Name, Namespace: bundles.Namespace}
		objs, err := render(c.Spec, bundles, eksd, eksaRelease, c.EksaVersion, c.SkipValidation, c.IamClusterID)
		if err != nil {
			out[c.Name] = result{Error: err.Error()}
			continue
		}
		out[c.Name] = result{Objects: objs}
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(out); err != nil {
		fail("writing output: %v", err)
	}
}

func render(path string, bundles *releasev1.Bundles, eksd []eksdv1alpha1.Release, rel *releasev1.EKSARelease, version string, skipValidation bool, iamClusterID string) ([]json.RawMessage, error) {
	cfg, err := cluster.ParseConfigFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("parsing: %w", err)
	}
	m, err := cluster.NewDefaultConfigManager()
	if err != nil {
		return nil, err
	}
	if err := m.SetDefaults(cfg); err != nil {
		return nil, fmt.Errorf("defaults: %w", err)
	}
	if err := m.Validate(cfg); err != nil && !skipValidation {
		return nil, fmt.Errorf("validation: %w", err)
	}
	v := anywherev1.EksaVersion(version)
	cfg.Cluster.Spec.EksaVersion = &v
	// The CLI's machine health check defaults (its flags' default values).
	cluster.SetMachineHealthCheckTimeoutDefaults(cfg.Cluster, constants.DefaultNodeStartupTimeout, constants.DefaultUnhealthyMachineTimeout)
	cluster.SetMachineHealthCheckMaxUnhealthyDefaults(cfg.Cluster, intstr.Parse(constants.DefaultMaxUnhealthy), intstr.Parse(constants.DefaultWorkerMaxUnhealthy))

	spec, err := cluster.NewSpec(cfg, bundles, eksd, rel)
	if err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	ctx := context.Background()
	log := logr.Discard()
	var objs []kubernetes.Object
	switch cfg.Cluster.Spec.DatacenterRef.Kind {
	case anywherev1.DockerDatacenterKind:
		cp, err := docker.ControlPlaneSpec(ctx, log, emptyCluster{}, spec)
		if err != nil {
			return nil, fmt.Errorf("control plane: %w", err)
		}
		w, err := docker.WorkersSpec(ctx, log, emptyCluster{}, spec)
		if err != nil {
			return nil, fmt.Errorf("workers: %w", err)
		}
		objs = append(cp.Objects(), w.WorkerObjects()...)
	case anywherev1.VSphereDatacenterKind:
		cp, err := vsphere.ControlPlaneSpec(ctx, log, emptyCluster{}, spec)
		if err != nil {
			return nil, fmt.Errorf("control plane: %w", err)
		}
		w, err := vsphere.WorkersSpec(ctx, log, emptyCluster{}, spec)
		if err != nil {
			return nil, fmt.Errorf("workers: %w", err)
		}
		objs = append(cp.Objects(), w.WorkerObjects()...)
		fd, err := vsphere.FailureDomainsSpec(log, spec)
		if err != nil {
			return nil, fmt.Errorf("failure domains: %w", err)
		}
		for _, o := range fd.Objects() {
			objs = append(objs, o)
		}
	case anywherev1.NutanixDatacenterKind:
		cp, err := nutanix.ControlPlaneSpec(ctx, log, emptyCluster{}, spec)
		if err != nil {
			return nil, fmt.Errorf("control plane: %w", err)
		}
		w, err := nutanix.WorkersSpec(ctx, log, emptyCluster{}, spec)
		if err != nil {
			return nil, fmt.Errorf("workers: %w", err)
		}
		objs = append(cp.Objects(), w.WorkerObjects()...)
	case anywherev1.TinkerbellDatacenterKind:
		cp, err := tinkerbell.ControlPlaneSpec(ctx, log, emptyCluster{}, spec)
		if err != nil {
			return nil, fmt.Errorf("control plane: %w", err)
		}
		w, err := tinkerbell.WorkersSpec(ctx, log, emptyCluster{}, spec)
		if err != nil {
			return nil, fmt.Errorf("workers: %w", err)
		}
		objs = append(cp.Objects(), w.WorkerObjects()...)
	default:
		return nil, fmt.Errorf("datacenter kind %s is not in the oracle", cfg.Cluster.Spec.DatacenterRef.Kind)
	}
	objs = append(objs, clusterapi.MachineHealthCheckObjects(spec.Cluster)...)
	out := make([]json.RawMessage, 0, len(objs)+1)
	rec := &recordingHelm{}
	if _, err := cilium.NewTemplater(helmFactory{rec}).GenerateManifest(ctx, spec); err != nil {
		return nil, fmt.Errorf("cilium: %w", err)
	}
	b, err := json.Marshal(map[string]interface{}{
		"kind":      "CiliumHelmChart",
		"chart":     rec.chart,
		"version":   rec.version,
		"namespace": rec.namespace,
		"values":    rec.values,
	})
	if err != nil {
		return nil, err
	}
	out = append(out, b)
	// capstan installs the package controller only when the spec has a packages section that
	// does not disable it (EKS Anywhere's CLI also when it has none).
	if p := spec.Cluster.Spec.Packages; p != nil && !p.Disable {
		chart, err := packagesChart(spec)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(chart)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	if spec.AWSIamConfig != nil {
		inside, err := iamManifest(spec, iamClusterID)
		if err != nil {
			return nil, err
		}
		out = append(out, inside...)
	}
	for _, o := range objs {
		b, err := json.Marshal(o)
		if err != nil {
			return nil, err
		}
		// A provider's optional object left nil (Tinkerbell's registry credentials Secret).
		if string(b) == "null" {
			continue
		}
		out = append(out, b)
	}
	return out, nil
}

// iamManifest is what EKS Anywhere's controller applies inside the cluster for its AWSIamConfig
// (awsiamauth.TemplateBuilder), each document as JSON.
func iamManifest(spec *cluster.Spec, id string) ([]json.RawMessage, error) {
	clusterID, err := uuid.Parse(id)
	if err != nil {
		return nil, fmt.Errorf("iamClusterID: %w", err)
	}
	manifest, err := (&awsiamauth.TemplateBuilder{}).GenerateManifest(spec, clusterID)
	if err != nil {
		return nil, fmt.Errorf("aws-iam-authenticator manifest: %w", err)
	}
	var out []json.RawMessage
	for _, doc := range strings.Split(string(manifest), "\n---") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		b, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			return nil, fmt.Errorf("aws-iam-authenticator manifest: %w", err)
		}
		out = append(out, b)
	}
	return out, nil
}

func readYAML(path string, into interface{}) {
	b, err := os.ReadFile(path)
	if err != nil {
		fail("reading %s: %v", path, err)
	}
	if err := yaml.UnmarshalStrict(b, into); err != nil {
		fail("parsing %s: %v", path, err)
	}
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "eksa-oracle: "+format+"\n", args...)
	os.Exit(1)
}
