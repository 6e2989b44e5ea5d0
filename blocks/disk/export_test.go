package disk

// For the external tests.
const TrailerLen = trailerLen

var AppendTrailer = appendTrailer
