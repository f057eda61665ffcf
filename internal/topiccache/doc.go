// Package topiccache keeps what an integration builds once per topic
// (attribute sets, resolved metric series), for at most Max topics, so
// that a service that meets ever new topics does not grow without bound.
package topiccache
