package suite

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// ServerSetting is one setting of the cluster the sustained scenario starts,
// written into its postgresql.conf before the server starts: a way to measure
// the load under the settings a deployment would run with (a max_wal_size
// sized to the WAL rate, say) and compare them with PostgreSQL's defaults in
// the same session. The report lists every setting given.
type ServerSetting struct {
	Name, Value string
}

// String is the setting as given: name=value.
func (s ServerSetting) String() string { return s.Name + "=" + s.Value }

// settingName is a PostgreSQL parameter's name, or a custom one (with a dot).
var settingName = regexp.MustCompile(`^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$`)

// clusterOwned are the settings the bench gives the server on its command
// line, which would override the same names in postgresql.conf.
var clusterOwned = []string{"listen_addresses", "port", "unix_socket_directories"}

// maxSettingValue bounds a setting's value, in bytes.
const maxSettingValue = 256

// ParseServerSetting reads name=value, as --server-setting takes it. The name
// is a parameter's (lowercase letters, digits, underscores, one dot at most);
// the value is at most 256 bytes of printable text. It does not know which
// parameters exist or what they accept: the server does, and refuses to start
// with one it rejects, with its reason. An error names the value and what
// was expected.
func ParseServerSetting(s string) (ServerSetting, error) {
	name, value, ok := strings.Cut(s, "=")
	name = strings.ToLower(strings.TrimSpace(name))
	switch {
	case !ok:
		return ServerSetting{}, fmt.Errorf("server setting %q: expected name=value, such as max_wal_size=8GB", s)
	case !settingName.MatchString(name):
		return ServerSetting{}, fmt.Errorf("server setting %q: expected a parameter name of letters, digits and underscores", name)
	case value == "" || len(value) > maxSettingValue || strings.IndexFunc(value, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return ServerSetting{}, fmt.Errorf("server setting %s: expected a value of 1 to %d printable characters", name, maxSettingValue)
	}
	for _, owned := range clusterOwned {
		if name == owned {
			return ServerSetting{}, fmt.Errorf("server setting %s: the bench sets it itself; expected another parameter", name)
		}
	}
	return ServerSetting{Name: name, Value: value}, nil
}

// confLine is the setting as a line of postgresql.conf, its value quoted:
// within the file's quoted strings a quote is written twice and a backslash
// starts an escape, so both are doubled.
func (s ServerSetting) confLine() string {
	return s.Name + " = '" + strings.NewReplacer(`\`, `\\`, "'", "''").Replace(s.Value) + "'\n"
}
