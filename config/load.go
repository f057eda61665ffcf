package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// EnvPrefix starts the environment variables that override a loaded file:
// REDEQ_<YAML_KEY_IN_UPPER_CASE>, such as REDEQ_CONCURRENCY=8 or
// REDEQ_RETRY_INTERVALS=1s,10s.
const EnvPrefix = "REDEQ_"

// maxFileBytes bounds a config file: it is a handful of settings.
const maxFileBytes = 1 << 20

// Load reads the YAML file at path (an empty path reads none), applies
// REDEQ_* environment overrides, fills defaults and validates. An unknown
// key in the file is an error. REDEQ_* variables that name no setting are
// ignored: orchestrators set some of their own (Kubernetes gives every pod
// REDEQ_PORT and REDEQ_SERVICE_HOST when a Service is named "redeq").
func Load(path string) (Config, error) {
	var c Config
	if path != "" {
		data, err := readFile(path)
		if err != nil {
			return Config{}, err
		}
		if c, err = Parse(data); err != nil {
			return Config{}, fmt.Errorf("config %s: %w", path, err)
		}
	}
	if err := c.applyEnv(os.Environ()); err != nil {
		return Config{}, err
	}
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if len(data) > maxFileBytes {
		return nil, fmt.Errorf("config %s: larger than %d bytes", path, maxFileBytes)
	}
	return data, nil
}

// Parse decodes YAML settings without defaults or validation. Unknown keys
// are an error.
func Parse(data []byte) (Config, error) {
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, err
	}
	return c, nil
}

// applyEnv sets the fields named by REDEQ_* entries of environ.
func (c *Config) applyEnv(environ []string) error {
	fields := envFields(c)
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, EnvPrefix) {
			continue
		}
		field, ok := fields[name]
		if !ok {
			continue
		}
		if err := setFromString(field, value); err != nil {
			return fmt.Errorf("config: %s=%q: %w", name, value, err)
		}
	}
	return nil
}

// envFields maps each REDEQ_* name to the field it sets.
func envFields(c *Config) map[string]reflect.Value {
	v := reflect.ValueOf(c).Elem()
	t := v.Type()
	out := make(map[string]reflect.Value, t.NumField())
	for i := range t.NumField() {
		tag := t.Field(i).Tag.Get("yaml")
		if tag == "" || tag == "-" {
			continue
		}
		out[EnvPrefix+strings.ToUpper(tag)] = v.Field(i)
	}
	return out
}

var durationType = reflect.TypeOf(time.Duration(0))

func setFromString(field reflect.Value, s string) error {
	switch {
	case field.Type() == durationType:
		d, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		field.SetInt(int64(d))
	case field.Kind() == reflect.String:
		field.SetString(s)
	case field.Kind() == reflect.Int:
		n, err := strconv.Atoi(s)
		if err != nil {
			return err
		}
		field.SetInt(int64(n))
	case field.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return err
		}
		field.SetBool(b)
	case field.Kind() == reflect.Pointer && field.Type().Elem().Kind() == reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return err
		}
		field.Set(reflect.ValueOf(&b))
	case field.Kind() == reflect.Slice && field.Type().Elem() == durationType:
		var list []time.Duration
		for _, part := range strings.Split(s, ",") {
			if len(list) >= MaxIntervals {
				return fmt.Errorf("more than %d intervals", MaxIntervals)
			}
			d, err := time.ParseDuration(strings.TrimSpace(part))
			if err != nil {
				return err
			}
			list = append(list, d)
		}
		field.Set(reflect.ValueOf(list))
	default:
		return fmt.Errorf("unsupported field type %s", field.Type())
	}
	return nil
}
