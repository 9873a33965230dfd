// pp GAP_US N: parent writes a byte to child every GAP_US (sleeping between), child blocks in read and echoes;
// prints each side's CPU per round trip and the round-trip time.
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/wait.h>
static double now(){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec*1e6+t.tv_nsec/1e3;}
static double cpu(){struct rusage u; getrusage(RUSAGE_SELF,&u); return u.ru_utime.tv_sec*1e6+u.ru_utime.tv_usec+u.ru_stime.tv_sec*1e6+u.ru_stime.tv_usec;}
int main(int c,char**v){int gap=atoi(v[1]),n=atoi(v[2]); int a[2],b[2]; pipe(a); pipe(b); char x=0;
 if(fork()==0){ double c0=cpu(); for(int i=0;i<n;i++){read(a[0],&x,1); write(b[1],&x,1);} printf("child cpu per wake %.1f us\n",(cpu()-c0)/n); return 0;}
 double c0=cpu(), rt=0; for(int i=0;i<n;i++){ if(gap) usleep(gap); double t=now(); write(a[1],&x,1); read(b[0],&x,1); rt+=now()-t;}
 printf("gap %d us: parent cpu per round %.1f us, round trip %.1f us\n",gap,(cpu()-c0)/n,rt/n); wait(0); return 0;}
