/* headers_standalone_wire.c - edgemon/wire.h compiles alone as C11, first include. */
#include "edgemon/wire.h"
