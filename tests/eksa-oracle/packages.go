package main

// Curated packages: EKS Anywhere's CLI installs the package controller on a management cluster
// with `helm upgrade --install` (curatedpackages.PackageControllerClient.Enable). The oracle
// runs Enable as the CLI's dependency factory sets it up for a cluster (WithPackageControllerClient
// in pkg/dependencies: the bundle's chart, the cluster's registry mirror and proxy, no AWS
// credentials in the environment) with a chart manager that only records, and prints what Helm
// would get, its values merged as Helm merges a values file and --set values, as one more object
// of kind PackagesHelmChart.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/aws/eks-anywhere/pkg/cluster"
	"github.com/aws/eks-anywhere/pkg/curatedpackages"
	"github.com/aws/eks-anywhere/pkg/filewriter"
	"github.com/aws/eks-anywhere/pkg/registrymirror"
)

// recordingCharts is a chart manager that records the one install it is asked for. Every other
// method is left to the embedded nil interface: Enable calls only InstallChart.
type recordingCharts struct {
	curatedpackages.ChartManager
	release, uri, version, namespace, valuesFile string
	skipCRDs                                     bool
	set                                          []string
}

func (r *recordingCharts) InstallChart(_ context.Context, chart, ociURI, version, _, namespace, valueFilePath string, skipCRDs bool, values []string) error {
	r.release, r.uri, r.version, r.namespace, r.valuesFile, r.skipCRDs, r.set = chart, ociURI, version, namespace, valueFilePath, skipCRDs, values
	return nil
}

// noAWSCredentials stands in for the regional registry check, which needs AWS credentials and
// the network: neither is here (nor given to capstan), so EKS Anywhere falls back to the public
// registry, as it does when the check fails.
type noAWSCredentials struct{}

func (noAWSCredentials) Test(context.Context, curatedpackages.RegistryAccessTestParams) error {
	return errors.New("eksa-oracle: no AWS credentials")
}

// packagesChart is what EKS Anywhere's CLI hands to Helm for the cluster's package controller.
func packagesChart(spec *cluster.Spec) (map[string]interface{}, error) {
	dir, err := os.MkdirTemp("", "eksa-oracle-packages-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	writer, err := filewriter.NewWriter(dir)
	if err != nil {
		return nil, err
	}
	bundle := spec.RootVersionsBundle()
	if bundle == nil {
		return nil, fmt.Errorf("packages: no versions bundle")
	}
	// The proxy the factory gives the client (getProxyConfiguration of pkg/dependencies).
	var httpProxy, httpsProxy string
	var noProxy []string
	if p := spec.Cluster.Spec.ProxyConfiguration; p != nil {
		httpProxy, httpsProxy = p.HttpProxy, p.HttpsProxy
		noProxy = append(noProxy, spec.Cluster.Spec.ClusterNetwork.Pods.CidrBlocks...)
		noProxy = append(noProxy, spec.Cluster.Spec.ClusterNetwork.Services.CidrBlocks...)
		noProxy = append(noProxy, p.NoProxy...)
		if e := spec.Cluster.Spec.ControlPlaneConfiguration.Endpoint; e != nil && e.Host != "" {
			noProxy = append(noProxy, e.Host)
		}
	}
	mgmt := spec.Cluster.Spec.ManagementCluster.Name
	if mgmt == "" {
		mgmt = spec.Cluster.Name
	}
	rec := &recordingCharts{}
	pc := curatedpackages.NewPackageControllerClient(rec, nil, spec.Cluster.Name, "", &bundle.PackageController.HelmChart,
		registrymirror.FromCluster(spec.Cluster),
		curatedpackages.WithHTTPProxy(httpProxy),
		curatedpackages.WithHTTPSProxy(httpsProxy),
		curatedpackages.WithNoProxy(noProxy),
		curatedpackages.WithManagementClusterName(mgmt),
		curatedpackages.WithValuesFileWriter(writer),
		curatedpackages.WithClusterSpec(spec),
		curatedpackages.WithRegistryAccessTester(noAWSCredentials{}),
		curatedpackages.WithSkipWait(),
	)
	if err := pc.Enable(context.Background()); err != nil {
		return nil, fmt.Errorf("packages: %w", err)
	}
	values := map[string]interface{}{}
	if rec.valuesFile != "" {
		b, err := os.ReadFile(rec.valuesFile)
		if err != nil {
			return nil, err
		}
		if err := yaml.Unmarshal(b, &values); err != nil {
			return nil, fmt.Errorf("packages values file: %w", err)
		}
	}
	for _, s := range rec.set {
		setValue(values, s)
	}
	return map[string]interface{}{
		"kind":      "PackagesHelmChart",
		"metadata":  map[string]interface{}{"name": rec.release},
		"chart":     rec.uri,
		"version":   rec.version,
		"namespace": rec.namespace,
		"skipCRDs":  rec.skipCRDs,
		"values":    values,
	}, nil
}

// setValue applies one `--set key.path=value` as Helm does for the values Enable passes: a
// dotted path of maps, `\,` an escaped comma, and true, false and integers typed.
func setValue(values map[string]interface{}, s string) {
	key, raw, _ := strings.Cut(s, "=")
	raw = strings.ReplaceAll(raw, `\,`, ",")
	var v interface{} = raw
	switch {
	case raw == "true":
		v = true
	case raw == "false":
		v = false
	default:
		if n, err := strconv.ParseInt(raw, 10, 64); err == nil {
			v = n
		}
	}
	path := strings.Split(key, ".")
	m := values
	for _, p := range path[:len(path)-1] {
		next, ok := m[p].(map[string]interface{})
		if !ok {
			next = map[string]interface{}{}
			m[p] = next
		}
		m = next
	}
	m[path[len(path)-1]] = v
}
