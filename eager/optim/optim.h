// Every optimizer and schedule in one include:
//
//   #include "eager/optim/optim.h"
//
// optimizer.h    Optimizer: step(), zero_grad(), lr()/set_lr()
// sgd.h          SGD (momentum, dampening, weight decay, Nesterov)
// adam.h         Adam, AdamW
// lr_schedule.h  StepLR, CosineAnnealingLR
// clip_grad.h    clip_grad_norm_
#pragma once

#include "eager/optim/adam.h"
#include "eager/optim/clip_grad.h"
#include "eager/optim/lr_schedule.h"
#include "eager/optim/optimizer.h"
#include "eager/optim/sgd.h"
