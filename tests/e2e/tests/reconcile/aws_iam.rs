//! An AWSIamConfig end to end on real API servers: the management cluster's KubeadmControlPlane
//! gets the API server's token webhook and the authenticator's files (its certificate and key
//! from the cluster's CA Secret, never in the object), and the authenticator itself (its
//! DaemonSet, RBAC, cluster ID and `aws-auth` mappings) goes inside the workload cluster as an
//! add-on, admitted by a real kube-apiserver; taken out again when the config is removed. The
//! workload cluster's API server and Cluster API's kubeconfig Secret are played as in
//! [`super::addons`].

use capstan_harness::run::{kubectl, kubectl_json};
use serde_json::Value;

use super::addons::{Bed, ready_node_1, workload_server};

const IAM: &str = "apiVersion: anywhere.eks.amazonaws.com/v1alpha1
kind: AWSIamConfig
metadata:
  name: ws-iam-auth
  namespace: t-iam
spec:
  awsRegion: eu-west-1
  backendMode: [EKSConfigMap]
  mapRoles:
    - roleARN: arn:aws:iam::123456789012:role/platform
      username: platform-admin
      groups: [system:masters]
  mapUsers:
    - userARN: arn:aws:iam::123456789012:user/alice
      username: alice
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aws_iam_config_puts_the_webhook_on_the_control_plane_and_the_authenticator_inside_its_cluster()
 {
    let cp = capstan_harness::shared().await;
    let w = workload_server().await;
    let bed = Bed::new("iam", &["ws-iam"]);
    let dir = format!("clusters/{}/workload-clusters/ws-iam", bed.mgmt);
    let spec_file = bed.root().join(&dir).join("cluster.yaml");
    let plain = std::fs::read_to_string(&spec_file).unwrap();
    let with_iam = plain.replacen(
        "  datacenterRef:\n",
        "  identityProviderRefs:\n    - kind: AWSIamConfig\n      name: ws-iam-auth\n  datacenterRef:\n",
        1,
    );
    assert_ne!(with_iam, plain);
    bed.write(&format!("{dir}/cluster.yaml"), &with_iam);
    bed.write(&format!("{dir}/iam.yaml"), IAM);
    ready_node_1(&w).await;
    bed.reconcile("r1").await;
    bed.kubeconfig_secret("ws-iam", w.kubeconfig_yaml()).await;
    bed.reconcile("r1").await;

    // On the management cluster: the API server's webhook flag and the authenticator's files,
    // the certificate and key by reference to the cluster's CA Secret.
    let mk = cp.kubeconfig_path();
    let kcp = kubectl_json(
        mk,
        &["-n", &bed.ns, "get", "kubeadmcontrolplanes", "ws-iam"],
    );
    let cluster_config = &kcp["spec"]["kubeadmConfigSpec"]["clusterConfiguration"];
    let args = cluster_config["apiServer"]["extraArgs"].to_string();
    assert!(
        args.contains("authentication-token-webhook-config-file")
            && args.contains(capstan_templates::render::node::AWS_IAM_WEBHOOK_CONFIG),
        "{args}"
    );
    let files = kcp["spec"]["kubeadmConfigSpec"]["files"]
        .as_array()
        .unwrap()
        .clone();
    let ca = capstan_templates::spec::aws_iam_ca_secret("ws-iam");
    for key in ["cert.pem", "key.pem"] {
        let f = files
            .iter()
            .find(|f| f.pointer("/contentFrom/secret/key") == Some(&Value::from(key)))
            .unwrap_or_else(|| panic!("no {key} file: {files:?}"));
        assert_eq!(f["contentFrom"]["secret"]["name"], ca.as_str(), "{f}");
        assert!(f.get("content").is_none(), "{f}");
    }
    assert!(
        files.iter().any(
            |f| f["path"] == "/var/lib/kubeadm/aws-iam-authenticator/kubeconfig.yaml"
                && f["content"]
                    .as_str()
                    .is_some_and(|c| c.contains("https://localhost:21362/authenticate"))
        ),
        "{files:?}"
    );
    // The AWSIamConfig itself is an EKS Anywhere object on the management cluster, as written.
    let config = kubectl_json(mk, &["-n", &bed.ns, "get", "awsiamconfigs", "ws-iam-auth"]);
    assert_eq!(config["spec"]["awsRegion"], "eu-west-1", "{config}");

    // Inside the workload cluster, as its API server holds them.
    let wk = w.kubeconfig_path();
    let ds = kubectl_json(
        wk,
        &[
            "-n",
            "kube-system",
            "get",
            "daemonset",
            "aws-iam-authenticator",
        ],
    );
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true, "{pod}");
    assert_eq!(
        pod["nodeSelector"]["node-role.kubernetes.io/control-plane"], "",
        "{pod}"
    );
    let container = &pod["containers"][0];
    let image = container["image"].as_str().unwrap();
    assert!(
        image.contains("aws-iam-authenticator:") && image.contains("eks-1-33"),
        "the EKS-D 1.33 build's image: {image}"
    );
    let args = container["args"].to_string();
    assert!(
        args.contains("--backend-mode=EKSConfigMap") && args.contains("--partition=aws"),
        "{args}"
    );
    assert_eq!(container["env"][0]["value"], "eu-west-1");
    let id = capstan_templates::render::authenticator::cluster_id(&bed.mgmt, &bed.ns, "ws-iam");
    let config = kubectl_json(
        wk,
        &[
            "-n",
            "kube-system",
            "get",
            "configmap",
            "aws-iam-authenticator",
        ],
    );
    assert_eq!(
        config["data"]["config.yaml"].as_str().unwrap().trim(),
        format!("clusterID: {id}")
    );
    let aws_auth = kubectl_json(wk, &["-n", "kube-system", "get", "configmap", "aws-auth"]);
    let roles =
        capstan_templates::yaml::parse_values(aws_auth["data"]["mapRoles"].as_str().unwrap())
            .unwrap()
            .remove(0);
    assert_eq!(
        roles,
        serde_json::json!([{"rolearn": "arn:aws:iam::123456789012:role/platform", "username": "platform-admin", "groups": ["system:masters"]}])
    );
    assert!(
        aws_auth["data"]["mapUsers"]
            .as_str()
            .unwrap()
            .contains("userarn: \"arn:aws:iam::123456789012:user/alice\""),
        "{aws_auth}"
    );
    for (kind, name) in [
        ("clusterrole", "aws-iam-authenticator"),
        ("clusterrolebinding", "aws-iam-authenticator"),
    ] {
        assert!(kubectl(wk, &["get", kind, name]).0, "{kind}/{name}");
    }
    assert!(
        kubectl(
            wk,
            &[
                "-n",
                "kube-system",
                "get",
                "serviceaccount",
                "aws-iam-authenticator"
            ]
        )
        .0
    );
    // Nothing of it on the management cluster.
    let (found, _) = kubectl(
        mk,
        &[
            "-n",
            "kube-system",
            "get",
            "daemonset",
            "aws-iam-authenticator",
        ],
    );
    assert!(!found, "the authenticator landed on the management cluster");

    // The config removed: the authenticator leaves the cluster. (The control plane's new
    // machines without the webhook are a rollout, which waits for Cluster API's controllers:
    // there are none on this bed.)
    bed.write(&format!("{dir}/cluster.yaml"), &plain);
    bed.remove(&format!("{dir}/iam.yaml"));
    bed.reconcile("r2").await;
    let (found, text) = kubectl(
        wk,
        &[
            "-n",
            "kube-system",
            "get",
            "daemonset",
            "aws-iam-authenticator",
        ],
    );
    assert!(!found && text.contains("NotFound"), "{text}");
    let (found, _) = kubectl(wk, &["-n", "kube-system", "get", "configmap", "aws-auth"]);
    assert!(!found, "aws-auth left behind");
}
