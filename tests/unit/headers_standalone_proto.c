/* headers_standalone_proto.c - edgemon/proto.h compiles alone as C11, first include. */
#include "edgemon/proto.h"
