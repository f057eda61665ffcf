//go:build race

package redeq

const raceEnabled = true
