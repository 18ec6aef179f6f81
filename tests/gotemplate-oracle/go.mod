// The oracle of capstan's Go template parser (layout/src/gotemplate): Go's own text/template
// with Sprig's function map, as the Cluster API add-on provider for Helm parses values
// templates. Built by the test harness (capstan_harness::ensure_gotemplate_oracle).
module capstan.dev/tests/gotemplate-oracle

go 1.25.0

require github.com/Masterminds/sprig/v3 v3.3.0

require (
	dario.cat/mergo v1.0.1 // indirect
	github.com/Masterminds/goutils v1.1.1 // indirect
	github.com/Masterminds/semver/v3 v3.3.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/huandu/xstrings v1.5.0 // indirect
	github.com/mitchellh/copystructure v1.2.0 // indirect
	github.com/mitchellh/reflectwalk v1.0.2 // indirect
	github.com/shopspring/decimal v1.4.0 // indirect
	github.com/spf13/cast v1.7.0 // indirect
	golang.org/x/crypto v0.26.0 // indirect
)
