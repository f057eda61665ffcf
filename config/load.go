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
// REDEQ_* environment overrides, fills defaults and validates. A file must
// hold one YAML document, and an unknown key in it is an error. REDEQ_*
// variables that name no setting are ignored: orchestrators set some of
// their own (Kubernetes gives every pod REDEQ_PORT and REDEQ_SERVICE_HOST
// when a Service is named "redeq").
//
// Invalid settings are reported together, each a *FieldError naming the
// file and YAML key ("redeq.yaml: scan_interval: -1s must be positive") or
// the variable that set it. A password in redis.url is refused when it
// comes from the file: passwords belong in the environment (see
// RedisConfig.PasswordEnv), and REDEQ_REDIS_URL may carry one.
func Load(path string) (Config, error) {
	var c Config
	if path != "" {
		data, err := readFile(path)
		if err != nil {
			return Config{}, err
		}
		if c, err = Parse(data); err != nil {
			return Config{}, fmt.Errorf("%s: %w", path, err)
		}
	}
	return finish(c, path, "")
}

// LoadSection is Load for a service's own YAML file that holds redeq's
// settings under key, a dotted path of mapping keys ("redeq", or
// "jobs.redeq"): the rest of the file is the service's and is not read.
// The REDEQ_* overrides, the defaults and the validation are Load's, and
// errors name the file and the key within it
// ("service.yaml: redeq.scan_interval: -1s must be positive"). A missing
// section is an error: a service that names one expects it to be there.
func LoadSection(path, key string) (Config, error) {
	if path == "" {
		return Config{}, errors.New("config: LoadSection needs a file")
	}
	names, err := sectionPath(key)
	if err != nil {
		return Config{}, err
	}
	data, err := readFile(path)
	if err != nil {
		return Config{}, err
	}
	c, err := parseSection(data, names)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return finish(c, path, key+".")
}

// sectionPath splits a LoadSection key into its mapping keys.
func sectionPath(key string) ([]string, error) {
	if key == "" {
		return nil, errors.New("config: LoadSection needs the key of redeq's section, such as \"redeq\"")
	}
	names := strings.Split(key, ".")
	for _, n := range names {
		if n == "" {
			return nil, fmt.Errorf("config: section key %q has an empty part", key)
		}
	}
	return names, nil
}

// parseSection decodes the mapping at names in a one-document YAML file as
// a Config; an unknown key in it is an error, as in Parse.
func parseSection(data []byte, names []string) (Config, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return Config{}, fmt.Errorf("no section %s: the file is empty", strings.Join(names, "."))
		}
		return Config{}, err
	}
	var next yaml.Node
	if err := dec.Decode(&next); err == nil {
		return Config{}, fmt.Errorf("a second YAML document starts at line %d: a config file holds one", next.Line)
	} else if !errors.Is(err, io.EOF) {
		return Config{}, err
	}
	n := &doc
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	for i, name := range names {
		if n.Kind != yaml.MappingNode {
			return Config{}, fmt.Errorf("line %d: %s is not a mapping", n.Line, strings.Join(names[:i], "."))
		}
		var found *yaml.Node
		for j := 0; j+1 < len(n.Content); j += 2 {
			if n.Content[j].Value == name {
				found = n.Content[j+1]
			}
		}
		if found == nil {
			return Config{}, fmt.Errorf("no section %s", strings.Join(names[:i+1], "."))
		}
		n = found
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return Config{}, nil // "redeq:" with nothing under it: every default
	}
	if n.Kind != yaml.MappingNode {
		return Config{}, fmt.Errorf("line %d: %s is not a mapping", n.Line, strings.Join(names, "."))
	}
	if err := knownKeys(n, strings.Join(names, ".")+".", ""); err != nil {
		return Config{}, err
	}
	var c Config
	if err := n.Decode(&c); err != nil {
		return Config{}, err
	}
	return c, nil
}

// knownKeys reports the first key under mapping n (at YAML path key within
// the section shown as shown) that names no setting.
func knownKeys(n *yaml.Node, shown, key string) error {
	known := make(map[string]bool)
	for _, s := range settings() {
		known[s.key] = true
	}
	var walk func(n *yaml.Node, key string) error
	walk = func(n *yaml.Node, key string) error {
		for j := 0; j+1 < len(n.Content); j += 2 {
			k, v := n.Content[j], n.Content[j+1]
			path := key + k.Value
			if !known[path] {
				return fmt.Errorf("line %d: %s%s: no such setting", k.Line, shown, path)
			}
			if v.Kind == yaml.MappingNode {
				if err := walk(v, path+"."); err != nil {
					return err
				}
			}
			lists := map[string]map[string]bool{"schedules": scheduleKeys(), "listeners": listenerKeys()}
			if itemKeys := lists[path]; itemKeys != nil && v.Kind == yaml.SequenceNode {
				for i, item := range v.Content {
					if item.Kind != yaml.MappingNode {
						continue // the decoder says what is wrong
					}
					for j := 0; j+1 < len(item.Content); j += 2 {
						if k := item.Content[j]; !itemKeys[k.Value] {
							return fmt.Errorf("line %d: %s%s[%d].%s: no such setting", k.Line, shown, path, i, k.Value)
						}
					}
				}
			}
		}
		return nil
	}
	return walk(n, key)
}

// finish applies the REDEQ_* overrides to c, fills defaults and
// validates, naming each invalid setting by file and by section plus key.
func finish(c Config, path, section string) (Config, error) {
	fromEnv, err := c.applyEnv(os.Environ())
	if err != nil {
		return Config{}, err
	}
	c = c.WithDefaults()
	errs := c.problems(func(field string) string { return section + fieldKey(field) })
	if path != "" && !fromEnv[fieldEnv("Redis.URL")] && urlHasPassword(c.Redis.URL) {
		errs = append(errs, &FieldError{Field: "Redis.URL", Key: fieldKey("Redis.URL"),
			Reason: "holds a password: keep it out of the file and name the variable that holds it in " + section + fieldKey("Redis.PasswordEnv")})
	}
	out := make([]error, len(errs))
	for i, e := range errs {
		e.File, e.keyed = path, true
		e.Key = section + e.Key
		if env := fieldEnv(e.Field); fromEnv[env] {
			e.Env = env
		}
		out[i] = e
	}
	if err := errors.Join(out...); err != nil {
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
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > maxFileBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxFileBytes)
	}
	return data, nil
}

// Parse decodes YAML settings without defaults or validation. Unknown keys
// are an error, and so is a second document: its settings would otherwise
// be ignored without a word.
func Parse(data []byte) (Config, error) {
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		if errors.Is(err, io.EOF) {
			return Config{}, nil
		}
		return Config{}, err
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
		return c, nil
	case err != nil:
		return Config{}, err
	default:
		return Config{}, fmt.Errorf("a second YAML document starts at line %d: a config file holds one", next.Line)
	}
}

// applyEnv sets the fields named by REDEQ_* entries of environ and
// reports which variables it applied.
func (c *Config) applyEnv(environ []string) (map[string]bool, error) {
	byEnv := make(map[string]setting)
	for _, s := range settings() {
		if s.env != "" {
			byEnv[s.env] = s
		}
	}
	v := reflect.ValueOf(c).Elem()
	applied := make(map[string]bool)
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		s, ok := byEnv[name]
		if !ok {
			continue
		}
		if err := setFromString(v.FieldByIndex(s.index), value); err != nil {
			return nil, fmt.Errorf("config: %s=%q: %w", name, value, err)
		}
		applied[name] = true
	}
	return applied, nil
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
	case field.Kind() == reflect.Slice && field.Type().Elem().Kind() == reflect.String:
		var list []string
		for part := range strings.SplitSeq(s, ",") {
			if part = strings.TrimSpace(part); part != "" {
				list = append(list, part)
			}
		}
		field.Set(reflect.ValueOf(list))
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
