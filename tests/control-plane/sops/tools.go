//go:build tools

package tools

import _ "github.com/getsops/sops/v3/cmd/sops"
