package testutil

import "testing"

// StartServerPicking is StartServer with the ports it tries taken from
// pick.
func StartServerPicking(t testing.TB, pick func(testing.TB) int, args ...string) *Server {
	t.Helper()
	needBinaries(t, "redis-server")
	s := &Server{t: t, Dir: t.TempDir(), args: args}
	s.startOnFreePort(pick)
	t.Cleanup(s.Kill)
	return s
}

// Pid is the server process's id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// BeforeCreate sets what runs before each redis-cli --cluster create of
// StartCluster, until the test ends.
func BeforeCreate(t testing.TB, f func(*ReplCluster)) {
	beforeCreate = f
	t.Cleanup(func() { beforeCreate = nil })
}
