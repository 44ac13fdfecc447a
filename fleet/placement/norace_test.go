//go:build !race

package placement

// raceEnabled is true in the race detector's build, where TestSimulationTable
// runs fewer fleet sizes.
const raceEnabled = false
