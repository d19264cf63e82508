// Compiles and links against an installed Tandem; exits 0 when the library answers sensibly.
#include <tandem/tandem.h>

int main() { return tandem::dtype_size(tandem::DType::kFloat32) == 4 ? 0 : 1; }
