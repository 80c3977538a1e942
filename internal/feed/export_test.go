package feed

// PostgresDSN is postgresDSN, for the package's black-box tests.
var PostgresDSN = postgresDSN
