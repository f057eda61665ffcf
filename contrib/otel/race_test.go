//go:build race

package redeqotel_test

const raceEnabled = true
