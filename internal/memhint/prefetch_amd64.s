#include "textflag.h"

// func Bytes(b []byte)
TEXT ·Bytes(SB), NOSPLIT, $0-24
	MOVQ b_base+0(FP), AX
	MOVQ b_len+8(FP), CX
	LEAQ (AX)(CX*1), DX
loop:
	CMPQ AX, DX
	JAE done
	PREFETCHT0 (AX)
	ADDQ $64, AX
	JMP loop
done:
	RET
