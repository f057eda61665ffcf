// Package config holds redeq's settings: one Config struct, its defaults,
// validation, and loading from a YAML file with REDEQ_* environment overrides.
//
// It sits beside the journey of a job: every station reads its settings
// from a Config, which redeq.New validates once.
package config
