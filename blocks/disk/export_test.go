package disk

// For the external tests.
const TrailerLen = trailerLen

var AppendTrailer = appendTrailer

// SmallMax is the size from which blocks get a file of their own.
const SmallMax = smallMax
