//go:build tools

// Package actionlint is never compiled (see the build constraint). The blank import keeps the
// actionlint command's module and its dependencies in go.mod and go.sum for "go mod tidy".
package actionlint

import (
	_ "github.com/rhysd/actionlint/cmd/actionlint"
)
