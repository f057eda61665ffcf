package pool

// AddSource is add.lua, for tests that call it as no Go caller would.
var AddSource = addSource

// PutSource is put.lua, for tests that call it as no Go caller would.
var PutSource = putSource
