//! How errors are shown: one line, each cause once.

/// An error and its causes on one line, each cause once: many errors already print their
/// source in their own message (kube's kubeconfig errors do), and printing the chain as is
/// would repeat it (`failed to read kubeconfig: …: failed to read kubeconfig: …`).
pub fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        let text = text.trim();
        if text.is_empty() || out.contains(text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(text);
    }
    out
}
