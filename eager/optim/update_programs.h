// The fused_elementwise programs (Note [Fused elementwise programs]) that
// more than one optimizer's update uses, each one pass over its tensors.
// Inputs are i0, i1, ...; the last result is the output.
#pragma once

namespace tandem::optim::programs {

// i0 * i1 + (i2 * i2) * i3: a decaying average of squares (Adam's second
// moment, RMSprop's square_avg), with i1 = decay and i3 = 1 - decay.
inline constexpr const char* kSquareAverage =
    "r0=mul(i0,i1);r1=mul(i2,i2);r2=mul(r1,i3);r3=add(r0,r2)";

// i0 * i1 + i2 * i3: a decaying average (Adam's first moment, RMSprop's
// centered grad_avg), with i1 = decay and i3 = 1 - decay.
inline constexpr const char* kAverage = "r0=mul(i0,i1);r1=mul(i2,i3);r2=add(r0,r1)";

// i0 - i1 / (sqrt(i2) + i3) * i4: a step scaled by a root mean square
// (p, g, square average, eps, lr), as RMSprop and Adagrad take it.
inline constexpr const char* kRootMeanSquareStep =
    "r0=sqrt(i2);r1=add(r0,i3);r2=div(i1,r1);r3=mul(r2,i4);r4=sub(i0,r3)";

// i0 - i1 * i2: p - direction * lr (SGD's and RMSprop-with-momentum's step).
inline constexpr const char* kDescent = "r0=mul(i1,i2);r1=sub(i0,r0)";

}  // namespace tandem::optim::programs
