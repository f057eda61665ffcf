// Package env carries what every component needs from its surroundings: the
// local clock and the logger.
//
// Due times never come from here: they come from the Redis server's TIME
// inside the scripts, so that clients with skewed clocks agree. The local
// clock only measures local things, such as when a lock was last extended.
package env
