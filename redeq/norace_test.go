//go:build !race

package redeq

const raceEnabled = false
